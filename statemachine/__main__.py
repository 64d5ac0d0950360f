"""`python -m statemachine fit --config config.yaml`: the LightningCLI for a config that names its classes.

The config (or the command line) chooses the model with `model.class_path` and the datamodule with
`data.class_path`; `python -m` puts the working directory on the import path, so its modules can be named
(`examples.digits.DigitsClassifier` from the repository root).
"""

from __future__ import annotations


def main() -> None:
    from statemachine.cli import LightningCLI

    LightningCLI(parser_kwargs={"prog": "python -m statemachine"})


if __name__ == "__main__":
    main()
