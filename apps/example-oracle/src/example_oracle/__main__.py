"""``python -m example_oracle``: run the example oracle."""

from example_oracle.demo import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
