"""Text in, features out: normalization, tokens and shingles, word weights, differences. Nothing stored."""
