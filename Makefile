# CUDA kernels for PyTorch, lesson by lesson.
#   make lessons      set up, build every lesson's kernels, run every lesson notebook headlessly (SOLUTIONS=1: theirs too)
#   make test-all     set up, then every test of the lessons, checker and simulator semantics; solution notebooks (nbval)
#   make test-toolkit the toolkit's own tests: nvcc compile check, build cache, packaging, public CUDA, PTX (CI runs both)
#   make lab          set up, then JupyterLab on lesson 01's notebook (the repository is its root; LAB_OPEN=path for another)
#   make check LESSON=01          check your exercise;  make hint LESSON=01 N=2   its hint 2
#   make profile LESSON=04        memory accesses per source line of a lesson's kernels, on the simulator
#   make profile LESSON=04 KERNEL=scale_add4   Nsight Compute on one variant, on a GPU (report in build/profile/)
#   make sanitize LESSON=05       your exercise's self-check under compute-sanitizer (GPU) or the simulator's orders
# Other targets: setup test test-arm64 bench doctor compile-check clean (README.md says what each does).
#
# By default everything runs in .venv, which `make setup` creates (with the CPU-only torch where there is no
# NVIDIA driver and no nvcc; TORCH=cpu or TORCH=cuda chooses). In an environment that already
# has the dependencies (Colab, a GPU machine), pass its interpreter: `make test-all PY=python3`;
# then nothing is installed and the network is not touched.

PY ?=
BASE_PYTHON ?= python3
VENV := .venv
ifeq ($(strip $(PY)),)
PYTHON := $(VENV)/bin/python
SETUP := $(VENV)/.installed
else
PYTHON := $(PY)
SETUP :=
endif

export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
export PYTHONUNBUFFERED := 1
LESSON ?=
LAB_OPEN ?= lessons/01_thread_model/01_thread_model.ipynb
TORCH ?=
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
ifneq ($(filter-out cpu cuda,$(TORCH)),)
$(error TORCH=$(TORCH): expected TORCH=cpu (the CPU-only torch), TORCH=cuda (the CUDA build), or no TORCH (chosen from this machine))
endif

.PHONY: help setup lessons lab test test-all test-toolkit test-arm64 check hint bench profile sanitize doctor compile-check nbval nbval-lessons clean

help:
	@awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' Makefile

# Found, not imported (importing torch would add seconds to every make check).
setup: $(SETUP)
	@$(PYTHON) -c "import importlib.util as u, sys; gone = [m for m in ('torch', 'ninja', 'nbval', 'matplotlib') if u.find_spec(m) is None]; gone and print('missing in $(PYTHON):', *gone); sys.exit(bool(gone))" || \
	  (echo "run 'make setup' without PY=, or install torch ninja jupyterlab nbval matplotlib pytest"; exit 1)

# pip install $(1), its whole output kept in $(VENV)/pip-install.log; on the screen one line per
# large download (so a long install shows what it is doing) and a count at the end.
PIP_INSTALL = { $(VENV)/bin/python -m pip install $(1) 2>&1; echo $$? >$(VENV)/.pip-status; } | tee -a $(VENV)/pip-install.log | \
	awk '/^ *Downloading .*[0-9.]+ [kMG]B\)$$/ { size = $$(NF-1); unit = $$NF; sub(/^\(/, "", size); \
	       if (unit ~ /^GB/ || (unit ~ /^MB/ && size + 0 >= 5)) { name = $$2; sub(/.*\//, "", name); print "  downloading " name " (" size " " unit; fflush() } } \
	     /^Successfully installed/ { print "  installed " NF - 2 (NF == 3 ? " package" : " packages"); fflush() } \
	     /^ERROR/ { print; fflush() }'; \
	status=$$(cat $(VENV)/.pip-status); test "$$status" = 0 || \
	  { echo "pip install failed (exit $$status): the last lines of $(VENV)/pip-install.log:"; tail -n 15 $(VENV)/pip-install.log; \
	    ! grep -q "No space left on device" $(VENV)/pip-install.log || \
	      echo "a disk is full: free some space where the venv, pip's cache and the temporary folder are (df -h), rm -rf $(VENV) and run make setup again"; exit 1; }

# A venv that sees the base interpreter's packages, so a torch that is already there is kept. Otherwise
# kernels/dev/torch_choice.py picks the torch and says why: PyTorch's CPU-only wheels (a fraction of the CUDA
# build's size) on a Linux x86-64 machine with no NVIDIA driver and no nvcc, else the default; TORCH=cpu or
# TORCH=cuda decides instead (a torch already there is kept either way: rm -rf .venv to switch). It stops first when the
# disk has too little room for that torch (SPACE_CHECK=0 tries anyway).
$(VENV)/.installed: pyproject.toml
	@test -x $(VENV)/bin/python || $(BASE_PYTHON) -m venv --system-site-packages $(VENV)
	@echo "setting up $(VENV): torch is large, so the first time takes a few minutes (log: $(VENV)/pip-install.log)"
	@$(VENV)/bin/python -m pip install -q --upgrade pip >>$(VENV)/pip-install.log 2>&1 || \
	  echo "  (pip could not be upgraded; going on with the one there)"
	@choice=$$($(VENV)/bin/python kernels/dev/torch_choice.py $(TORCH) --venv $(VENV)) || exit 2; echo "  $${choice#*	}"; \
	  if [ "$${choice%%	*}" = cpu ]; then echo "  from $(TORCH_CPU_INDEX)"; $(call PIP_INSTALL,torch --index-url $(TORCH_CPU_INDEX)); fi
	@$(call PIP_INSTALL,-e .)
	@touch $@
	@echo "set up: $$($(VENV)/bin/python -c 'import torch; print("torch", torch.__version__, "(CUDA build)" if torch.version.cuda else "(CPU only)")')"

# The lesson notebooks as a learner runs them (exercise stubs in place); the solution notebooks ship executed and
# make test-all runs them under nbval, so they join only with SOLUTIONS=1.
lessons: setup
	$(PYTHON) -m kernels.dev.run_notebooks lessons $(if $(filter 1,$(SOLUTIONS)),solutions)

lab: setup
	$(PYTHON) -m jupyter lab --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/$(LAB_OPEN) $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# The quick check (kernels/dev/all_tests.py): the simulator builds, then every lesson's tests.
test: setup
	$(PYTHON) -m kernels.dev.all_tests build-cache lesson-tests

# TARGETS="7.5 8.0 8.9 9.0" (or TARGETS=all): built for each of those GPUs, the gates kept (kernels/gates.py).
compile-check: setup
	$(PYTHON) -m kernels.dev.compile_check $(if $(TARGETS),--targets $(TARGETS))

nbval: setup
	$(PYTHON) -m kernels.dev.all_tests nbval

nbval-lessons: setup
	$(PYTHON) -m kernels.dev.all_tests nbval-lessons

# kernels/dev/all_tests.py runs the steps in two lanes where there are two cores (the lanes share pytest's
# files and the notebooks) and prints a summary: each step's time and counts, and the slowest tests and builds.
test-all: setup
	$(PYTHON) -m kernels.dev.all_tests

# The machinery a learner never changes: the nvcc compile check of every .cu and the tests marked `toolkit`
# (the build cache under concurrency and crashes, precompiled headers, an installed wheel, the test runner, and the
# simulator's reach beyond the lessons: public CUDA's APIs and idioms, inline PTX).
test-toolkit: setup
	$(PYTHON) -m kernels.dev.all_tests --toolkit

# The simulator on arm64 Linux, emulated with qemu-user (x86-64 Linux, apt-get as root the first time):
# lesson 04's check and the simulator's fiber and fault tests; ARM64=full for all of tests/test_sim.py.
# kernels/sim/README.md ("Platforms") says what it sets up and how long it takes.
test-arm64: setup
	PY=$(PYTHON) bash tests/arm64/run.sh $(ARM64)

check: setup
	@test -n "$(LESSON)" || (echo "which lesson? make check LESSON=04"; exit 2)
	$(PYTHON) -m kernels.exercises $(LESSON) $(EX)

# make hint LESSON=02 N=2 prints hint 2 of the lesson's exercise (EX=name picks one of several).
hint: setup
	@test -n "$(LESSON)" || (echo "which lesson? make hint LESSON=02 N=1"; exit 2)
	@$(PYTHON) -m kernels.exercises $(LESSON) $(EX) --hint $(or $(N),1)

# RECORD=1 also copies each lesson's CSV, with date and torch version, to kernels/benchmarks/recorded/
# (committed, so that notebooks on the simulator can show the GPU figures with show_recorded).
bench: setup
	$(PYTHON) -m kernels.benchmarks $(if $(filter 1,$(RECORD)),--record) $(LESSON)

# The simulator's access profile (sectors per request, bank ways, active lanes per source line)
# of a lesson's variants; Nsight Compute's counters for the same probes on a GPU: tests/toolkit/ncu_compare.py.
# KERNEL=name on a GPU: Nsight Compute on that variant (kernels/tools/nsight.py), the report kept in build/profile/.
# Both offer the variants that kernels/lessons/lessonNN.py declares.
profile: setup
	@test -n "$(LESSON)" || (echo "which lesson? make profile LESSON=04 [KERNEL=scale_add4]"; exit 2)
	$(PYTHON) -m kernels.tools.profile $(LESSON) $(KERNEL)

# The lesson's self-check (SOLUTION=1: the solution's) under compute-sanitizer's memcheck, racecheck,
# synccheck and initcheck on a GPU (TOOLS=memcheck,racecheck picks some), with PyTorch's caching
# allocator off; on the simulator, in every thread order with blocks shuffled (kernels/tools/sanitize.py).
sanitize: setup
	@test -n "$(LESSON)" || (echo "which lesson? make sanitize LESSON=05 [SOLUTION=1] [TOOLS=memcheck]"; exit 2)
	$(PYTHON) -m kernels.tools.sanitize $(LESSON) $(if $(filter 1,$(SOLUTION)),--solution) $(if $(TOOLS),--tools $(TOOLS))

doctor:
	@$(if $(SETUP),test -x $(PYTHON) || (echo "no $(VENV) yet: run 'make setup' first (or make doctor PY=python3)"; exit 1))
	$(PYTHON) -m kernels.tools.doctor

# Build caches and generated files only: your edits in lessons/ are never touched.
clean:
	rm -rf build .pytest_cache
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +
	find . -name .ipynb_checkpoints -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +
