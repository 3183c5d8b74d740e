"""The running service: the aiohttp application and its parts (``app``), starting and
stopping it on a port (``runner``), the scheduler of its periodic duties, and the event
loop every satsgate process runs on."""
