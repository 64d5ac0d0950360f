"""The warning category of the hardware plane (it cannot use the upper layers' TrainerWarning)."""


class DeviceWarning(UserWarning):
    """Every UserWarning `devices` emits: users see a UserWarning, the project's own tests turn it into an error."""
