"""Tools for a GPU machine, each a command line: `make profile` (profile.py: the simulator's access tables,
or Nsight Compute through nsight.py), `make sanitize` (sanitize.py: compute-sanitizer), ptxas's registers
and spills (ptxas.py) and `make doctor` (doctor.py)."""
