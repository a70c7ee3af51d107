"""A rank's environment is built from an allow-list of the worker's: its secrets, and anything
unknown, stay with the worker; the ordinary and the tuning variables a program relies on pass;
an operator names more with LAUNCHBAY_JOB_PASS_ENV, never the service's own credentials."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from jobs.spec import JobSpec
from service.settings import Settings
from worker.launch import RunPaths, build_env
from worker.passed_env import held_back, passed_env

INDEX_URL = "https://ci:hunter2@pypi.internal.example/simple"
# A worker's environment as an operator leaves it: the service's settings and secrets, other
# services' tokens, and what jobs need.
SECRETS = {
    "LAUNCHBAY_PIP_INDEX_URL": INDEX_URL,
    "LAUNCHBAY_PIP_FIND_LINKS": "https://ci:hunter2@wheels.internal.example/",
    "LAUNCHBAY_DATABASE_URL": "postgresql://lb:pw@db/lb",
    "LAUNCHBAY_REDIS_URL": "redis://:pw@redis:6379/0",
    "LAUNCHBAY_ADMIN_TOKEN": "lb_admin",
    "LAUNCHBAY_DATA_DIR": "/srv/launchbay",
    "ADMIN": "lb_unrelated_token",
    "GITHUB_TOKEN": "ghp_x",
    "HF_TOKEN": "hf_x",
    "WANDB_API_KEY": "w",
    "PIP_INDEX_URL": INDEX_URL,
    "UV_DEFAULT_INDEX": INDEX_URL,
    "AWS_SECRET_ACCESS_KEY": "aws",
    "PGPASSWORD": "pg",
    "REDIS_PASSWORD": "r",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "RANK": "3",
    "TORCHELASTIC_RUN_ID": "old",
}
ORDINARY = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/launchbay",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "Europe/Paris",
    "HTTPS_PROXY": "http://proxy.internal:3128",
    "no_proxy": "localhost,.internal",
    "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
}
TUNING = {
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "CUDA_MODULE_LOADING": "LAZY",
    "NCCL_SOCKET_IFNAME": "ib0",
    "NCCL_IB_HCA": "mlx5",
    "NCCL_NET_PLUGIN": "aws-ofi",  # the operator's own choice; a job may not set it
    "GLOO_SOCKET_IFNAME": "eth1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "OMP_PROC_BIND": "close",
    "FI_PROVIDER": "efa",
}
WORKER_ENV = {**SECRETS, **ORDINARY, **TUNING}
PATHS = RunPaths.for_attempt(Path("/data"), "job1", 1)


def rank_env(
    base_env: dict[str, str], pass_env: tuple[str, ...] = (), **spec: object
) -> dict[str, str]:
    return build_env(
        JobSpec(name="t", recipe="synthetic", **spec),  # type: ignore[arg-type]
        job_id="job1",
        attempt=1,
        paths=PATHS,
        resume_from=None,
        cuda_available=True,
        base_env=base_env,
        pass_env=pass_env,
    )


def test_a_rank_gets_the_ordinary_and_tuning_variables_and_nothing_else() -> None:
    env = rank_env(WORKER_ENV)
    inherited = {k: v for k, v in env.items() if k in WORKER_ENV}
    assert inherited == {**ORDINARY, **TUNING}
    credentials = ("hunter2", "pw@", "lb_admin", "lb_unrelated_token", "ghp_x", "hf_x")
    leaked = [v for v in env.values() if any(secret in v for secret in credentials)]
    assert leaked == []


def test_a_spec_s_env_still_reaches_every_rank() -> None:
    env = rank_env(WORKER_ENV, env={"HF_TOKEN": "the user's", "HTTPS_PROXY": "http://mine:1"})
    assert (env["HF_TOKEN"], env["HTTPS_PROXY"]) == ("the user's", "http://mine:1")


@pytest.mark.parametrize(
    "value",
    [
        "http://bob:hunter2@proxy.internal:3128",
        "socks5h://bob:hunter2@proxy.internal:1080",
        "bob:hunter2@proxy.internal:3128",
    ],
)
def test_an_allowed_variable_holding_a_password_is_held_back(value: str) -> None:
    base = {"HTTPS_PROXY": value, "http_proxy": "http://bob@proxy.internal:3128"}
    assert passed_env(base) == {"http_proxy": base["http_proxy"]}, "a user name alone is no secret"
    assert held_back(base) == ["HTTPS_PROXY"]
    assert passed_env(base, ["HTTPS_PROXY"])["HTTPS_PROXY"] == value, "named: the operator's call"
    assert held_back(base, ["HTTPS_PROXY"]) == []


def test_an_operator_names_more_by_name_or_prefix() -> None:
    base = {**WORKER_ENV, "HF_HOME": "/models", "HF_HUB_OFFLINE": "1", "SITE_REGION": "eu"}
    env = passed_env(base, ["HF_HUB_*", "HF_HOME", "SITE_REGION", "LAUNCHBAY_DATA_DIR"])
    for name in ("HF_HOME", "HF_HUB_OFFLINE", "SITE_REGION", "LAUNCHBAY_DATA_DIR"):
        assert env[name] == base[name]
    assert "HF_TOKEN" not in env


def test_the_service_s_credentials_never_pass_whatever_the_operator_names() -> None:
    named = ["LAUNCHBAY_*", "AWS_*", "PG*", "REDIS_*", "DATABASE_URL", "RANK", "TORCHELASTIC_*"]
    env = passed_env({**WORKER_ENV, "DATABASE_URL": "postgresql://x:y@db/z"}, named)
    for name in (
        "LAUNCHBAY_PIP_INDEX_URL",
        "LAUNCHBAY_PIP_FIND_LINKS",
        "LAUNCHBAY_DATABASE_URL",
        "LAUNCHBAY_REDIS_URL",
        "LAUNCHBAY_ADMIN_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "PGPASSWORD",
        "REDIS_PASSWORD",
        "DATABASE_URL",
        "RANK",
        "TORCHELASTIC_RUN_ID",
    ):
        assert name not in env, name
    assert env["LAUNCHBAY_DATA_DIR"] == "/srv/launchbay"


def test_the_setting_takes_names_and_prefixes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHBAY_JOB_PASS_ENV", " HF_HOME, WANDB_* ,,")
    assert Settings().job_pass_env == ["HF_HOME", "WANDB_*"]
    monkeypatch.delenv("LAUNCHBAY_JOB_PASS_ENV")
    assert Settings().job_pass_env == []
    for wrong in ("*", "HF_*_DIR", "A-B", "1X", "X*Y"):
        with pytest.raises(ValidationError, match="not a variable name"):
            Settings(job_pass_env=[wrong])
