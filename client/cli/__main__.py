"""`python -m client.cli`: the same as the `launchbay` command."""

from client.cli import main

main()
