"""The facade: ``Memory`` and ``AsyncMemory``. Validates what callers pass, opens and wires the parts
(``_open``), and performs the I/O that the feature folders decide. Nothing below it imports it."""
