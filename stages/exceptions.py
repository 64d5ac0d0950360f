"""Exception types users of Lightning already catch."""


class MisconfigurationException(Exception):
    """A setting, a return value or a combination of them that cannot work."""


class TrainerWarning(UserWarning):
    """Every UserWarning `statemachine` and `stages` emit: users see a UserWarning, the project's own tests turn it into
    an error (without touching torch's or other libraries' warnings)."""


class PossibleUserWarning(TrainerWarning):
    """A setting that is legal but probably not what was meant."""
