"""A pass computed outside this process: on Ray workers (distributed: the driver's side; ray_worker:
what runs in a worker) and over --tp ranks (tensor_parallel: the group; tp_rank: one rank;
tp_preflight: what one rank holds). Part of the engine: it may import what the engine may."""
