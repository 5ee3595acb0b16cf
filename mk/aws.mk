# AWS side: SAM CLI environment, template / state machine checks and `sam build`. Included by the Makefile.
#
#   make sam-venv   create .venv-sam (aws-sam-cli + cfn-lint, kept apart: SAM pins its own boto3)
#   make validate   cfn-lint (what `sam validate --lint` runs) and statelint over statemachines/*.asl.json, both
#                   from the dev environment: no SAM CLI needed
#   make build      sam build (functions + the orbital layer for python3.13 / arm64)
#   make layer-check  build the layer's dependency set for this machine and import every function with only
#                   that set and boto3 on sys.path (catches a dependency the layer lacks)

SAM_VENV := .venv-sam
SAM_BIN := $(SAM_VENV)/bin
SAM_STAMP := $(SAM_VENV)/.installed-stamp
SAM_CLI_VERSION ?= 1.170.0
CFN_LINT_VERSION ?= 1.58.0

# SAM's python builder validates a python3.13 binary on PATH; pyenv keeps one out of PATH on some machines.
PY313_DIR := $(firstword $(wildcard /root/.pyenv/versions/3.13.0/bin))
SAM_PYTHON := $(if $(PY313_DIR),$(PY313_DIR)/python3,python3)
SAM_PATH := $(if $(PY313_DIR),$(PY313_DIR):)$(abspath $(SAM_BIN)):$(PATH)
SAM_ENV := SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1

LAYER_OUT := .aws-sam/build/OrbitalLayer/python
LAYER_CHECK := .aws-sam/layer-check
ENTRY_POINTS := $(patsubst functions/%/,%,$(sort $(dir $(wildcard functions/*/*.py))))
STATE_MACHINES := $(sort $(wildcard statemachines/*.asl.json))

.PHONY: sam-venv validate build layer-check

$(SAM_STAMP): mk/aws.mk
	@{ [ -x $(SAM_BIN)/python ] || $(SAM_PYTHON) -m venv $(SAM_VENV); }
	$(SAM_BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=24"
	$(SAM_BIN)/python -m pip install --quiet --disable-pip-version-check \
	  "aws-sam-cli==$(SAM_CLI_VERSION)" "cfn-lint==$(CFN_LINT_VERSION)"
	@touch $@

sam-venv: $(SAM_STAMP)

# `sam validate --lint` is cfn-lint's check of the template and nothing else (its other mode needs AWS credentials):
# the dev environment's cfn-lint, pinned in requirements/dev.lock, runs it once without installing the SAM CLI.
validate: $(STAMP)
	$(BIN)/cfn-lint --regions us-east-1 -- template.yaml
ifeq ($(STATE_MACHINES),)
	@echo "statelint: no state machines in statemachines/"
else
	$(BIN)/statelint $(STATE_MACHINES)
endif

build: $(SAM_STAMP)
	PATH="$(SAM_PATH)" $(SAM_ENV) $(SAM_BIN)/sam build --template-file template.yaml
	@test -d $(LAYER_OUT)/orbital || { echo "the layer has no python/orbital"; exit 1; }
	@test -n "$$(ls $(LAYER_OUT)/pydantic_core/_pydantic_core.cpython-313-aarch64-linux-gnu.so 2>/dev/null)" \
	  || { echo "the layer's pydantic_core is not a cp313 aarch64 build"; exit 1; }
	@echo "layer: $$(du -sh $(LAYER_OUT) | cut -f1) unpacked in $(LAYER_OUT)"

layer-check:
	rm -rf $(LAYER_CHECK) && mkdir -p $(LAYER_CHECK)/runtime
	$(MAKE) --no-print-directory -C layers/orbital build-OrbitalLayer PYTHON=$(SAM_PYTHON) WHEEL_TARGET= \
	  ARTIFACTS_DIR=$(abspath $(LAYER_CHECK)/layer)
	env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null PIP_ROOT_USER_ACTION=ignore \
	  $(SAM_PYTHON) -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
	  --target $(LAYER_CHECK)/runtime boto3
	@for fn in $(ENTRY_POINTS); do \
	  [ -f functions/$$fn/$$fn.py ] || continue; \
	  AWS_DEFAULT_REGION=us-east-1 $(SAM_PYTHON) -I -S -c "import sys; \
	    sys.path[:0] = ['functions/$$fn', '$(LAYER_CHECK)/layer/python', '$(LAYER_CHECK)/runtime']; \
	    import $$fn; assert callable($$fn.lambda_handler)" || { echo "$$fn: import failed"; exit 1; }; \
	  echo "$$fn: imports with the layer alone"; \
	done
