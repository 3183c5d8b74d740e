"""CPU engine work on other machines: ``satsgate worker`` processes that take jobs from a
queue in the store's PostgreSQL (issue 30, docs/scale.md "Workers").

- :mod:`~satsgate.workers.codec`: what crosses the queue (a function's name, pickled
  arguments and outcomes, read back by a restricted unpickler);
- :mod:`~satsgate.workers.gateway`: :class:`QueueCpuRunner`, the gateway's CpuRunner
  for ``[workers] mode = "queue"``;
- :mod:`~satsgate.workers.worker`: the worker process;
- the queue's SQL is :mod:`satsgate.store.cpu_queue`, its wake-ups
  :mod:`satsgate.store.pg_listen`.
"""
