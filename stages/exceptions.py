"""Exception types users of Lightning already catch."""


class MisconfigurationException(Exception):
    """A setting, a return value or a combination of them that cannot work."""
