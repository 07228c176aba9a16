"""Analysis of stored results: NERO plot data, consensus, dimension reduction, rankings."""
