"""The SQLite store: the only package that speaks SQL. Schema migrations, tables by group, index runs and their
codecs."""
