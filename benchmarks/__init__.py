"""StateFuse benchmarks: ``python -m benchmarks`` (or ``python3 dev.py bench``).

Modules: `workload` (reproducible op streams), `materialize` (the measurements), `report` (table,
JSON, machine info). See benchmarks/README.md for what each row means and the targets.
"""

from benchmarks.materialize import Row, Target, Unit
from benchmarks.workload import WorkloadGenerator, bench_registry

__all__ = ["Row", "Target", "Unit", "WorkloadGenerator", "bench_registry"]
