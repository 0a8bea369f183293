"""pyxis' importer (issue 35; named by the plugstack line's `importer=`, installed by the containers step): run by
pyxis as the job's user, it asks the node's image service (service.py, root) for the image and hands pyxis the
shared cache's squashfs. It holds no credential and reads none: the service imports with root's.

The protocol is pyxis' (v0.24.0, https://github.com/NVIDIA/pyxis: importer.c, importers/README.md):
  - pyxis execve(2)s the `importer=` path itself (importer.c importer_exec: `execve(importer_path, argv, environ)`,
    after setregid/setreuid to the job's gid and uid), so that path is an executable file, not a command line;
    stdin is /dev/null, and the environment is the job's (pyxis_slurmstepd.c enroot_set_env: the job's variables,
    SLURM_JOB_UID/GID from the job's credentials) with SLURM_JOB_ID among them;
  - `get IMAGE_URI` (importer_exec_get: argv {path, "get", image_uri}; the URI always `docker://...`, pyxis prefixes a
    bare one: enroot_container_create): pyxis reads the first line of stdout, its newline trimmed
    (get_line_from_file), as the squashfs path; a non-zero exit, a signal or an empty line fails the import, and
    pyxis then prints what the importer wrote to stderr (memfd_print_log); stdout and stderr are separate;
  - `release` (importer_exec_release: argv {path, "release"}), called after `enroot create` and again at task
    cleanup, so "implementations must be idempotent" (README); exit 0. Here it does nothing: the cache keeps the file.

Exit codes here: 0 with the path; 1 when the service refused or failed (its one line on stderr); 2 for a usage error.
Standard library and the contract only, so it runs under `python3 -I` (the job's PYTHON* variables ignored)."""

from __future__ import annotations

import os
import socket
import sys
from typing import List, Mapping, Optional, TextIO

from hpcc_contract import containers as c
from hpcc_contract import formats

PROG = "hpcc pyxis importer"
SOCKET_ENV = "HPCC_IMAGES_SOCKET"  # a test's socket; the job's own choice only ever reaches the job's own


class Failed(Exception):
    pass


def ask(path: str, request: c.ImageRequest, timeout_s: float = c.ANSWER_TIMEOUT_S) -> c.ImageAnswer:
    """One request to the service at `path`, its answer; Failed when there is no service or no answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(c.REQUEST_TIMEOUT_S)
        try:
            sock.connect(path)
        except OSError as e:
            raise Failed(f"no image service at {path} ({e.strerror or e}): is the node's agent running?") from None
        sock.sendall(c.dumps_request(request))
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(timeout_s)  # the import itself: minutes for a large image
        data = b""
        while len(data) <= c.MAX_ANSWER:
            chunk = sock.recv(c.MAX_ANSWER + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        raise Failed(f"the image service did not answer within {timeout_s:.0f} s") from None
    except OSError as e:
        raise Failed(f"the image service's connection failed: {e}") from None
    finally:
        sock.close()
    if not data:
        raise Failed("the image service closed the connection without an answer")
    try:
        return c.loads_answer(data.split(b"\n", 1)[0])
    except (c.BadRecord, formats.NewerFormat) as e:
        raise Failed(f"the image service's answer: {e}") from None


def main(
    argv: Optional[List[str]] = None,
    env: Optional[Mapping[str, str]] = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    args = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    if args == ["release"]:
        return 0
    if len(args) != 2 or args[0] != "get":
        err.write(f"{PROG}: usage: get IMAGE_URI | release (pyxis' importer protocol)\n")
        return 2
    job = env.get("SLURM_JOB_ID", "")
    try:
        request = c.ImageRequest(args[1], job)
        c.dumps_request(request)  # a job id that is none refused here, not by the service
    except c.BadRecord:
        err.write(f"{PROG}: SLURM_JOB_ID {job[:20]!r} is not a Slurm job id (run by pyxis inside a job)\n")
        return 2
    try:
        answer = ask(env.get(SOCKET_ENV) or c.SERVICE_SOCKET, request)
    except Failed as e:
        err.write(f"{PROG}: {e}\n")
        return 1
    if answer.path is None:
        err.write(f"{PROG}: {args[1][:200]}: {answer.error}\n")
        return 1
    out.write(answer.path + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
