"""The case studies behind ``orbitscope demo``."""
