"""The roles ``memory_provider.MemoryProvider`` is made of, over one shared state.

- :mod:`._store`: :class:`Store`, the records of every sandbox, snapshot and volume of
  every memory provider in this process (:data:`STORE`), which the roles hold;
- :mod:`._control`: :class:`MemoryControl`, the control plane (sandboxes, pause,
  snapshots, volumes, metrics);
- :mod:`._commands`: :class:`MemoryCommands`, exec, background processes and shells;
- :mod:`._files`: :class:`MemoryFiles`, the files API;
- :mod:`._box`, :mod:`._bwrap`, :mod:`._procs`, :mod:`._paths`: what a sandbox is on the
  host, the bubblewrap that holds it and ``nsenter`` into it, its processes seen from the
  host, and paths resolved inside its root.
"""

from ._box import NAME
from ._commands import MemoryCommands
from ._control import MemoryControl
from ._files import MemoryFiles
from ._store import STORE, Store

__all__ = ["NAME", "STORE", "MemoryCommands", "MemoryControl", "MemoryFiles", "Store"]
