"""Sketch, pair and cluster a corpus past one machine on a Ray cluster, with the engine `dedupdb add` runs, and
load the result into a local store (`dedupdb ray`, `dedupdb import`). Needs the optional `ray` extra; nothing in
the local tool imports this package."""
