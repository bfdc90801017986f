"""One module per command group; each is thin over the ``store`` library."""
