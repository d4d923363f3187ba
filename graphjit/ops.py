"""What graphjit knows about torch's ops by name, shared by capture and the compiler."""
import operator

# Words in the name of an op or function that draws random numbers (torch.rand, F.dropout, aten.bernoulli,
# normal_, multinomial ...): such ops are neither folded into constants nor recomputed.
RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "exponential")


def is_random_name(name):
    return any(word in name for word in RANDOM_WORDS)


# The operators of augmented assignments (`x += y` is operator.iadd in a captured graph): on a tensor they
# write in place.
AUGMENTED_ASSIGNMENTS = frozenset((
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
    operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor, operator.ilshift,
    operator.irshift))
