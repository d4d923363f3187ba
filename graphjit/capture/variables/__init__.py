"""What the symbolic interpreter holds on its stack: one file per family of values."""
from .base import Variable, ConstantVariable, NullVariable, NULL, unsupported
