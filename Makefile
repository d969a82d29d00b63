# fmha: `make deps && make`, then `bin/fmha.exe ...`; `make test`. See README.md.
#
# PLATFORM: amd (hipcc: gfx908, gfx90a, gfx942, gfx1100) or nvidia (nvcc: sm_90). Default: the
# GPU this machine has; without one, amd if an AMD compiler is there (hipcc, or the Debian 13
# root that `make deps` sets up on Debian 12), else nvidia.
# HIPCC: the hipcc of the Debian 13 root that `make deps` sets up where the system's ROCm does not
# know gfx942 (run in that root by tools/trixie_hipcc.sh), else the system's.
# FMHA_CACHE: outside the clone, so that every clone on this machine reuses the root and its ccache.
export FMHA_CACHE ?= /var/cache/fmha
TRIXIE_ROOT = $(FMHA_CACHE)/trixie
TRIXIE_HIPCC = $(CURDIR)/tools/trixie_hipcc.sh
HIPCC ?= $(if $(wildcard $(TRIXIE_ROOT)/.fmha-packages),$(TRIXIE_HIPCC),$(shell command -v hipcc))
NVCC ?= $(or $(shell command -v nvcc),$(wildcard /usr/local/cuda/bin/nvcc))
PLATFORM ?= $(shell if nvidia-smi -L >/dev/null 2>&1; then echo nvidia; elif [ -e /dev/kfd ]; then echo amd; \
                    elif [ -n "$(HIPCC)" ]; then echo amd; elif [ -n "$(NVCC)" ]; then echo nvidia; fi)
# The Python of the generator and the tests: yours (PYTHON=...), else tools/python.sh chooses
# it, as it does for `make deps`.
ifeq ($(PYTHON),)
PYTHON := $(shell bash tools/python.sh 2>/dev/null)
endif
# Compiler launcher: ccache when installed, for rebuilds (`make LAUNCHER=` at configure: none);
# the AMD build with tools/trixie_hipcc.sh runs the root's own ccache instead. CCACHE_BASEDIR
# keeps the clone's path out of ccache's hashes, so another clone's build hits the same entries.
LAUNCHER ?= $(if $(and $(filter amd,$(PLATFORM)),$(filter $(TRIXIE_HIPCC),$(HIPCC))),,$(shell command -v ccache))
LAUNCH = $(if $(LAUNCHER),env;CCACHE_BASEDIR=$(CURDIR);$(LAUNCHER))
JOBS ?= $(shell nproc)
BUILD_DIR = build/$(PLATFORM)
BINARIES = fmha.exe fmha_unit_tests fmha_gpu_tests fmha_capi_tests libfmha.so

ifeq ($(PLATFORM),amd)
CMAKE_COMPILERS = -DCMAKE_CXX_COMPILER=$(HIPCC) $(if $(filter $(TRIXIE_HIPCC),$(HIPCC)),-DFMHA_HIP_ROOT=$(TRIXIE_ROOT))
else
CMAKE_COMPILERS = -DCMAKE_CUDA_COMPILER=$(NVCC) -DCMAKE_CUDA_HOST_COMPILER=$(shell command -v g++)
endif

.PHONY: all deps generate configure build resources test list clean check-platform
all: build

deps:
	@bash tools/deps.sh

check-platform:
	@case "$(PLATFORM)" in amd|nvidia) ;; *) echo "make: no platform: install hipcc or nvcc (make deps), or set PLATFORM=amd|nvidia" >&2; exit 1;; esac
	@PYTHON="$(PYTHON)" bash tools/python.sh >/dev/null || { echo "make: $(if $(filter file,$(origin PYTHON)),\
	  run \`make deps\`: it installs them,install them into PYTHON=$(PYTHON) or unset PYTHON)" >&2; exit 1; }

# Re-renders the recorded catalogue selection (python3 setup.py ... to change it); only
# changed files are rewritten, so Ninja rebuilds only what moved.
generate: check-platform
	@$(PYTHON) setup.py --refresh

configure: generate
	@[ -f $(BUILD_DIR)/build.ninja ] || cmake -S . -B $(BUILD_DIR) -G Ninja -DFMHA_PLATFORM=$(PLATFORM) \
	  -DFMHA_PYTHON=$(PYTHON) $(CMAKE_COMPILERS) \
	  -DCMAKE_CXX_COMPILER_LAUNCHER="$(LAUNCH)" -DCMAKE_CUDA_COMPILER_LAUNCHER="$(LAUNCH)"

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)
	@mkdir -p bin && for b in $(BINARIES); do [ ! -f $(BUILD_DIR)/$$b ] || cp $(BUILD_DIR)/$$b bin/; done
	@echo "make: $(PLATFORM) build in $(BUILD_DIR), binaries in bin/"

# Each AMD kernel's VGPR/AGPR/SGPR, scratch, spills, LDS and occupancy, as its compile reported
# them; fails on scratch or a VGPR spill (SGPR spills stay in VGPR lanes, not memory).
resources: configure
	@cmake --build $(BUILD_DIR) --target resources -j $(JOBS)

# A summary on the terminal; the full output in $(BUILD_DIR)/test.log (tools/run_tests.sh).
test: build
	@bash tools/run_tests.sh $(PLATFORM) $(BUILD_DIR) $(PYTHON) $(JOBS)

list: check-platform
	@$(PYTHON) setup.py --refresh --list

clean:
	rm -rf build bin generated python/build python/fmha.egg-info
