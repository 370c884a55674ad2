"""Triton's interpreter on the CPU, for the kernels' CPU checks (the tests and
scripts/device/kernels_check.py --smoke; TRITON_INTERPRET=1 set before the kernels import).

Triton 3.6's interpreter turns a loop bound into an int with int(1-element array), which NumPy
>= 2.3 refuses; the kernels are fine (they compile on the GPU). `index_shim` gives the
interpreter's tensors an `__index__` that reads their one element; calling it twice is one shim.
"""


def index_shim() -> None:
    from triton.runtime import interpreter
    patch = interpreter._patch_lang_tensor
    if getattr(patch, 'index_shim', False):
        return

    def with_index(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, '__index__', lambda self: int(self.handle.data.reshape(-1)[0]))
    with_index.index_shim = True
    interpreter._patch_lang_tensor = with_index
