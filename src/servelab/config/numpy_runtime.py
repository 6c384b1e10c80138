"""NumPy's transparent-huge-page hint, off for the processes servelab owns.

NumPy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on every large array. Where the
kernel's THP defrag setting is ``madvise`` (this host: ``/sys/kernel/mm/transparent_hugepage/defrag``), a fault
in such an array may compact memory synchronously, and the thread faulting holds the GIL meanwhile: decoding a
64 MB JSON request off the loop into a 13 MB array stalled the event loop 5-6 times for 30-60 ms each (the
small requests' P99 of tests/integration/test_limits_large_body.py went to 56-69 ms against its 50 ms bar;
with the hint off no stall passed 20 ms). Arrays here are request tensors, short-lived: huge pages buy
little and the stalls cost every request in flight. :func:`main` of the ``servelab`` command calls
:func:`disable_numpy_hugepages`; ``NUMPY_MADVISE_HUGEPAGE`` set by the user (NumPy's own switch, read when
NumPy is imported) is left to decide.
"""

from __future__ import annotations

import importlib
import os

__all__ = ["disable_numpy_hugepages"]


def disable_numpy_hugepages() -> bool:
    """Stop NumPy's huge-page hint for new arrays of this process; False when the user's variable decides or
    this NumPy has no such switch."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return False
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):  # NumPy 2, NumPy 1
        try:
            switch = importlib.import_module(module)._set_madvise_hugepage
        except (ImportError, AttributeError):
            continue
        switch(False)
        return True
    return False
