"""akgpy's version, in one place: the package, setup.py and what akgpy writes into its artifacts
(kernel-meta .json `compiler`) read it here."""
__version__ = "0.1.0"
