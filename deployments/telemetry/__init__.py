"""Live telemetry of a node: what the node agent samples, broadcasts and keeps.

* :mod:`.gpu`: per-GPU readings through NVML (``nvidia-ml-py``), or ``nvidia-smi --query-gpu``
  when NVML cannot be used (with the parser for its CSV, measurement case C15);
* :mod:`.host`: host CPU per NUMA node and per pinned CPU set, memory, load, and the CPU and
  RSS of each engine's process tree (``/proc`` and ``psutil``);
* :mod:`.engine`: engine ``/metrics`` scraped concurrently, parsed with ``prometheus_client``
  and normalised across SGLang, vLLM and ``sim``; tok/s from counter deltas;
* :mod:`.loop`: the long-lived event loop the scrapes and broadcasts run on;
* :mod:`.sampler`: the sampler thread of the node agent (``node.sample``,
  ``deployment.sample``); :mod:`.events`: ``health.change`` and ``deployment.status``;
* :mod:`.history`: 1 s rollups written in batches, and pruning; :mod:`.selectors`: history as
  chart series; :mod:`.tasks`: the hourly prune task.

:mod:`.gpu`, :mod:`.engine`, :mod:`.host` and :mod:`.loop` import nothing from Django, so
``deployments/scripts/nvml_check.py`` and ``telemetry_bench.py --nvml --host`` run on a bare GPU
host with only ``nvidia-ml-py`` and ``psutil`` installed. This ``__init__`` imports nothing.
"""
