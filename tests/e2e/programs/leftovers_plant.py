"""Alice's job: leaves a 0600 file holding $LEFTOVER_SECRET in /tmp, /var/tmp and /dev/shm, a
System V shared memory segment and a message queue (key $LEFTOVER_KEY) holding it, and a
"compiled extension" in its build directory; prints ``PLANT {"uid": ...}``."""

import ctypes
import json
import os

IPC_CREAT = 0o1000
secret = os.environ["LEFTOVER_SECRET"].encode()
name, key = f"leftover-{os.environ['LEFTOVER_TAG']}", int(os.environ["LEFTOVER_KEY"])
for directory in ("/tmp", "/var/tmp", "/dev/shm"):
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secret)
    os.close(fd)

libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment = libc.shmget(key, 4096, IPC_CREAT | 0o600)
address = libc.shmat(segment, None, 0)
ctypes.memmove(address, secret, len(secret))
libc.shmdt(ctypes.c_void_p(address))


class Message(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 128)]


queue = libc.msgget(key, IPC_CREAT | 0o600)
libc.msgsnd(queue, ctypes.byref(Message(1, secret)), len(secret), 0)

built = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "alice_op")
os.makedirs(built, exist_ok=True)
with open(os.path.join(built, "alice_op.so"), "wb") as extension:
    extension.write(secret)
print("PLANT " + json.dumps({"uid": os.getuid(), "segment": segment, "queue": queue}), flush=True)
