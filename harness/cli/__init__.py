"""The `harness` command: flags, config files, and the rich views."""
