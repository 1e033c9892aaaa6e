"""`python -m toyrl.cli`: the `toyrl` command."""

from toyrl.cli import main

if __name__ == "__main__":
    main()
