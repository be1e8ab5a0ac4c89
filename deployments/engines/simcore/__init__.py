"""Building blocks of the ``sim`` engine (``python -m deployments.engines.sim_server``).

- :mod:`.profile`: performance profiles (JSON data in ``deployments/data/sim_profiles``).
- :mod:`.text`: the deterministic tokenizer and output-text generator.
- :mod:`.engine`: the scheduler that turns the profile into prefill batches, decode steps,
  KV admission, retraction and queueing on one asyncio event loop.
- :mod:`.kv`: the prefill side's bootstrap listener and the decode side's KV fetch client.
- :mod:`.metrics`: Prometheus metrics with SGLang's ``sglang:`` names.
- :mod:`.app`: the aiohttp application speaking SGLang's HTTP API.
"""
