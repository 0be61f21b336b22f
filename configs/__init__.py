"""The shipped configuration: the emulator's default accounts and catalog, and example manifests.

This folder is also the package ``relaybatch.configs`` (pyproject.toml maps it), so an installed
wheel carries these files and ``relaybatch emulator serve`` finds its default without a checkout.
"""
