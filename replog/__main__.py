"""`python -m replog` runs the `replog` command."""

from replog.cli import main

main()
