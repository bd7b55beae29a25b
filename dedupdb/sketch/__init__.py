"""Signatures and verdicts: MinHash, SimHash, winnowing, Bloom filters, fingerprints, verification. No SQL, no files."""
