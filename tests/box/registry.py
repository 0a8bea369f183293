"""A real OCI registry for the box (issue 35): Debian's docker-registry (distribution 2.8) on the host's bridge
address, plain HTTP and anonymous, and a test image built here with umoci and pushed with skopeo. Its access log
(distribution's Combined Log Format, one line a request: https://distribution.github.io/distribution/about/
configuration/#accesslog) counts the pulls: a layer's blob GET is that layer fetched.

The image is busybox (Debian's busybox-static: one static binary) under /bin with a shell and the few applets the
jobs run, and a marker file holding a token new each run, so no cache of an earlier run can hold it."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.box.machine import GATEWAY

PORT = 5000
APPLETS = ("sh", "cat", "echo", "hostname", "ls", "nc", "sleep", "test", "wc")
MARKER = "/hpcc-image-marker"


@dataclass
class Registry:
    work: Path
    process: subprocess.Popen | None = None
    images: dict = field(default_factory=dict)  # reference -> {"digest", "layers", "token"}

    @property
    def address(self) -> str:
        return f"{GATEWAY}:{PORT}"

    @property
    def access_log(self) -> Path:
        return self.work / "registry.log"

    def start(self, timeout: float = 30) -> None:
        data = self.work / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.work / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.address}\n"
        )
        with self.access_log.open("ab") as log:
            self.process = subprocess.Popen(
                ["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline, last = time.time() + timeout, ""
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError as e:
                last = str(e)
            if self.process.poll() is not None or time.time() > deadline:
                raise AssertionError(
                    f"the registry on {self.address} did not answer /v2/ ({last}); exit {self.process.poll()}: "
                    f"{self.access_log.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.work / "data", ignore_errors=True)

    def build(self, repository: str, tag: str) -> str:
        """The test image pushed as `<registry>/<repository>:<tag>`; its reference (Docker's form, which pyxis and
        enroot take: a registry named with a port)."""
        layout, bundle = self.work / f"{repository.replace('/', '_')}-{tag}", self.work / "bundle"
        shutil.rmtree(layout, ignore_errors=True)
        shutil.rmtree(bundle, ignore_errors=True)
        token = secrets.token_hex(8)
        umoci = ["umoci"]
        run(*umoci, "init", "--layout", str(layout))
        run(*umoci, "new", "--image", f"{layout}:{tag}")
        run(*umoci, "unpack", "--image", f"{layout}:{tag}", str(bundle))
        binary = bundle / "rootfs/bin"
        binary.mkdir(parents=True)
        shutil.copy2("/bin/busybox", binary / "busybox")
        for applet in APPLETS:
            (binary / applet).symlink_to("busybox")
        (bundle / "rootfs" / MARKER.lstrip("/")).write_text(token + "\n")
        for mount_point in ("fsx", "etc", "tmp", "proc", "dev", "sys"):
            (bundle / "rootfs" / mount_point).mkdir(exist_ok=True)
        run(*umoci, "repack", "--image", f"{layout}:{tag}", str(bundle))
        run(*umoci, "config", "--image", f"{layout}:{tag}", "--config.cmd", "/bin/sh")
        reference = f"{self.address}/{repository}:{tag}"
        run("skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:{tag}", f"docker://{reference}")
        shutil.rmtree(bundle, ignore_errors=True)
        manifest = run("skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{reference}")
        layers = [layer["digest"] for layer in json.loads(manifest)["layers"]]
        digest = run("skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{reference}")
        self.images[reference] = {"digest": digest.strip(), "layers": layers, "token": token}
        return reference

    def blob_gets(self, reference: str) -> dict[str, int]:
        """Each of the image's layers -> how many times the registry served it (a GET answered 200)."""
        repository = reference.split("/", 1)[1].rsplit(":", 1)[0]
        text = self.access_log.read_text(errors="replace")
        counts = {}
        for layer in self.images[reference]["layers"]:
            line = re.compile(rf'"GET /v2/{re.escape(repository)}/blobs/{re.escape(layer)} HTTP/[0-9.]+" 200 ')
            counts[layer] = len(line.findall(text))
        return counts


def run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[-1000:]}")
    return done.stdout
