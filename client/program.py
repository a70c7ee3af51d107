"""The command after `launchbay run --`, read as the job spec's fields (pure: no I/O).

    -- python train.py ARGS                 entrypoint train.py, args ARGS
    -- train.py ARGS                        the same (torchrun's own spelling)
    -- torchrun --nproc-per-node 2 [--nnodes 1] train.py ARGS
                                            the same, with nproc_per_node 2 (nnodes 1) and
                                            launcher torchrun
    -- python -m torch.distributed.run ...  as torchrun
    -- python -m torch.distributed.launch [--use-env] ... train.py ARGS
                                            as torchrun, each rank also given --local_rank=<n>
                                            unless --use-env (pass_local_rank_arg: true)
    -- NAME=value ... python train.py       the assignments go to the spec's env

The interpreter's own flags `-u`, `-B`, `-O`, `-OO`, `-E`, `-s`, `-I` and `-W`/`-X ARG` are
accepted and dropped (each rank runs `python -u` already). torchrun's placement flags
(`--standalone`, `--node-rank`, `--master-addr`, `--master-port`, `--rdzv-*`, `--local-addr`)
are Launchbay's to choose and dropped; `--max-restarts N` becomes the spec's `max_restarts`;
any other flag, `python -m MODULE` for another module (a job runs a script file: the spec has
no field for a module), `python -c`, or a program that is not Python is refused with
`CommandError`, saying what is taken.
"""

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from client.errors import CommandError

TAKEN = (
    "give the program as 'python SCRIPT ARGS', 'SCRIPT.py ARGS' or "
    "'torchrun [--nproc-per-node N] [--nnodes N] SCRIPT ARGS'"
)
PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
PYTHON_FLAGS = {"-u", "-B", "-O", "-OO", "-E", "-s", "-I", "-b", "-bb", "-q"}
PYTHON_FLAGS_WITH_VALUE = {"-W", "-X"}
TORCHRUN_MODULES = {"torch.distributed.run": False, "torch.distributed.launch": True}
# torchrun's flags that say where the ranks meet: Launchbay's choice, so they are dropped.
PLACEMENT_FLAGS = {"node-rank", "master-addr", "master-port", "rdzv-backend", "rdzv-endpoint"}
PLACEMENT_FLAGS |= {"rdzv-id", "rdzv-conf", "local-addr", "rdzv-timeout", "monitor-interval"}
PLACEMENT_SWITCHES = {"standalone"}
NUMBER_FLAGS = {"nproc-per-node": "nproc_per_node", "nnodes": "nnodes"}
NUMBER_FLAGS |= {"max-restarts": "max_restarts"}


@dataclass
class Program:
    """What the command says of the job: the script (relative to the packed directory, with
    '/'), its arguments, and the spec fields the command names (the others stay unset)."""

    entrypoint: str
    args: list[str]
    fields: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def parse_command(command: list[str]) -> Program:
    """Read `command` (what follows `launchbay run --`) as a Program, or raise CommandError."""
    words = list(command)
    env: dict[str, str] = {}
    while words and (assigned := ASSIGNMENT.fullmatch(words[0])):
        env[assigned.group(1)] = assigned.group(2)
        words.pop(0)
    if not words:
        raise CommandError(f"no program to run: {TAKEN}")
    program, rest = words[0], words[1:]
    name = PurePosixPath(program).name
    if PYTHON.fullmatch(name):
        parsed = _python(rest)
    elif name == "torchrun":
        parsed = _torchrun(rest, local_rank_arg=False)
    elif program.endswith(".py"):
        parsed = Program(entrypoint=program, args=rest)
    else:
        raise CommandError(f"cannot run {program!r}: {TAKEN}")
    parsed.env = env
    return parsed


def _python(words: list[str]) -> Program:
    index = 0
    while index < len(words):
        word = words[index]
        if word in PYTHON_FLAGS:
            index += 1
        elif word in PYTHON_FLAGS_WITH_VALUE:
            index += 2
        elif word == "-m" and index + 1 < len(words):
            module = words[index + 1]
            if module not in TORCHRUN_MODULES:
                raise CommandError(
                    f"cannot run 'python -m {module}': a job runs a script file; "
                    "run it as 'python path/to/script.py' (or add a script that imports it)"
                )
            return _torchrun(words[index + 2 :], local_rank_arg=TORCHRUN_MODULES[module])
        elif word.startswith("-"):
            raise CommandError(f"cannot run python with {word!r}: {TAKEN}")
        else:
            return Program(entrypoint=word, args=words[index + 1 :])
    raise CommandError(f"no script to run: {TAKEN}")


def _torchrun(words: list[str], *, local_rank_arg: bool) -> Program:
    """torchrun's (or torch.distributed.launch's) flags, then the script and its args."""
    fields: dict[str, Any] = {"launcher": "torchrun"}
    index = 0
    while index < len(words) and words[index].startswith("-"):
        flag, has_value, value = words[index].lstrip("-").partition("=")
        flag = flag.replace("_", "-")
        index += 1
        if flag in ("use-env",):
            local_rank_arg = False
            continue
        if flag in PLACEMENT_SWITCHES:
            continue
        if flag not in PLACEMENT_FLAGS and flag not in NUMBER_FLAGS:
            raise CommandError(f"cannot run torchrun with {words[index - 1]!r}: {TAKEN}")
        if not has_value:
            if index >= len(words):
                raise CommandError(f"torchrun's --{flag} needs a value")
            value = words[index]
            index += 1
        if flag in NUMBER_FLAGS:
            fields[NUMBER_FLAGS[flag]] = _number(flag, value)
    if index >= len(words):
        raise CommandError(f"no script to run: {TAKEN}")
    if local_rank_arg:
        fields["pass_local_rank_arg"] = True
    return Program(entrypoint=words[index], args=words[index + 1 :], fields=fields)


def _number(flag: str, value: str) -> int:
    if not value.isdigit():
        raise CommandError(
            f"torchrun's --{flag} {value!r} is not a number: give the count "
            "(a worker runs as many ranks as the spec asks, on its own devices)"
        )
    return int(value)


def entrypoint_in(directory: str, script: str) -> str:
    """The script as a path inside the packed directory (both absolute, or `script`
    relative to it), with '/'; CommandError when it lies outside."""
    path = PurePosixPath(script)
    if path.is_absolute():
        try:
            path = path.relative_to(PurePosixPath(directory))
        except ValueError:
            raise CommandError(f"{script} is outside the directory that is packed") from None
    parts = [part for part in path.parts if part not in ("", ".")]
    if not parts or ".." in parts:
        raise CommandError(f"{script} is outside the directory that is packed")
    return "/".join(parts)


@dataclass
class RunOptions:
    """`launchbay run`'s own flags (None: not given); `env` is added to the spec's."""

    nproc_per_node: int | None = None
    nnodes: int | None = None
    queue: str | None = None
    env: dict[str, str] = field(default_factory=dict)


NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME_CHARS = 128


def run_spec(
    program: Program,
    code_id: str,
    packed: list[str],
    options: RunOptions,
    base: dict[str, Any] | None = None,
    directory_name: str = "",
) -> dict[str, Any]:
    """The job spec that runs `program` from the upload `code_id` (whose files are `packed`):
    the spec file's fields (`base`), then what the command says, then `options`. Without a
    rank count anywhere, one rank: as `python train.py` and `torchrun train.py` run one."""
    spec = dict(base or {})
    if "recipe" in spec:
        raise CommandError("the spec file names a recipe; 'launchbay run' runs your program")
    check_packed(program, packed)
    spec["code"] = {"code_id": code_id, "entrypoint": program.entrypoint}
    spec["args"] = list(program.args)
    spec.setdefault("name", default_name(directory_name, program.entrypoint))
    spec.update(program.fields)
    for key, given in (("nproc_per_node", options.nproc_per_node), ("nnodes", options.nnodes)):
        said = program.fields.get(key)
        if given is not None and said is not None and said != given:
            flag = key.replace("_", "-")
            raise CommandError(f"--{flag} {given} and the command's --{flag} {said} disagree")
        if given is not None:
            spec[key] = given
    spec.setdefault("nproc_per_node", 1)
    if options.queue is not None:
        spec["queue"] = options.queue
    if program.env or options.env:
        given_env = spec.get("env")
        spec["env"] = {**(given_env if isinstance(given_env, dict) else {})}
        spec["env"].update({**program.env, **options.env})
    return spec


def check_packed(program: Program, packed: list[str]) -> None:
    """CommandError (`entrypoint_not_packed`) unless the script is among the packed files."""
    if program.entrypoint not in packed:
        raise CommandError(
            f"{program.entrypoint} is not among the files packed: it does not exist, is not a "
            "regular file, or .gitignore or .launchbayignore leaves it out",
            code="entrypoint_not_packed",
        )


def default_name(directory_name: str, entrypoint: str) -> str:
    """`<directory>-<script>`: `mnist-train` for mnist/train.py; letters, digits, `._-`."""
    stem = PurePosixPath(entrypoint).stem
    words = [NAME_CHARS.sub("-", part).strip("-") for part in (directory_name, stem)]
    return "-".join(word for word in words if word)[:MAX_NAME_CHARS] or "run"
