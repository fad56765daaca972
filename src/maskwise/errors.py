"""The one exception type that means "the user asked for something we cannot do".

The CLI turns a ``UserError`` into a single line on stderr and exit code 2; anything else is a bug
and keeps its traceback. Library code raises it for bad input (a missing file, an unknown config
key, a ratio outside (0, 1)) so that the message, not a stack, reaches the user.
"""


class UserError(ValueError):
    """Bad input from the user. The message must fit on one line and name the problem."""
