"""MkDocs hooks: generate the reference pages that come from the code (filled in below)."""
