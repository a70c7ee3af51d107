"""What a hostile job reaches: it looks for the secrets listed in ./secrets.txt in every
/proc/*/environ and cmdline and every file it can read under the data dir,
tries the database file, another job's run and checkpoint directories ($SNOOP_OTHER_JOB), the
worker's environ ($SNOOP_WORKER_PID), and reports as JSON in its checkpoint directory."""

import json
import os
import pwd
from pathlib import Path

secrets = Path("secrets.txt").read_text().split()  # in its own code directory
data = Path(os.environ["SNOOP_DATA_DIR"])
other = os.environ["SNOOP_OTHER_JOB"]
found: list[str] = []


def look(where: str, blob: bytes) -> None:
    for secret in secrets:
        if secret.encode() in blob:
            found.append(where)


def attempt(path: Path) -> str:
    try:
        if path.is_dir():
            os.listdir(path)
        else:
            with open(path, "rb") as handle:
                handle.read(1)
        return "opened"
    except OSError as exc:
        return type(exc).__name__


look("own environ", b"\0".join(f"{k}={v}".encode() for k, v in os.environ.items()))
for proc in Path("/proc").iterdir():
    if proc.name.isdigit():
        for name in ("environ", "cmdline"):
            try:
                look(f"{proc}/{name}", (proc / name).read_bytes())
            except OSError:
                pass
own = str(data / "runs" / os.environ["LAUNCHBAY_JOB_ID"])
for root, _, files in os.walk(data):
    for name in files if not root.startswith(own) else []:
        try:
            look(os.path.join(root, name), Path(root, name).read_bytes()[: 1 << 22])
        except OSError:
            pass
report = {
    "uid": os.getuid(),
    "user": pwd.getpwuid(os.getuid()).pw_name,
    "found": found,
    "database": attempt(Path(os.environ["SNOOP_DATABASE"])),
    "worker_environ": attempt(Path(f"/proc/{os.environ['SNOOP_WORKER_PID']}/environ")),
    "other_logs": attempt(data / "runs" / other / "attempt-1" / "logs"),
    "other_log_file": attempt(data / "runs" / other / "attempt-1" / "logs" / "rank-0.log"),
    "other_checkpoints": attempt(data / "checkpoints" / other),
    "data_dir_listing": attempt(data),
}
out = Path(os.environ["LAUNCHBAY_OUTPUT_DIR"]) / "snoop.json"
out.write_text(json.dumps(report))
