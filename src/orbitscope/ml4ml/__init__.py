"""ML4ML (Liao, Zhang & Chen, arXiv 2109.12926): variance matrices, assessors, the model database
and the model zoo."""
