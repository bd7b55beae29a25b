"""Keeping the store's indexes right: LSH banding, the indexer, the containment index, clusters, groups, the check."""
