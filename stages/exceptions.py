"""Exception types users of Lightning already catch."""


class MisconfigurationException(Exception):
    """A setting, a return value or a combination of them that cannot work."""


class PossibleUserWarning(UserWarning):
    """A setting that is legal but probably not what was meant."""
