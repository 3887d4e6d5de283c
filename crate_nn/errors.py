"""The failures a command line expects beside Python's own (ValueError, OSError …): an image file Pillow cannot
decode, a training loss that stopped being finite. Defined here, without torch, so that `crate_nn.cli` names them
before anything heavy is imported; `crate_nn.data` and `crate_nn.engine` raise them and export them under the same
names."""


class CorruptImageError(RuntimeError):
    """An image file that Pillow cannot decode (raised only under ``strict``; the message names the file)."""


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the run stopped before updating the weights."""
