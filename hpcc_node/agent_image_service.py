"""A compute node's agent runs the node's image service (issue 35; hpcc_node/containers/service.py): root's, on
hpcc_contract.containers.SERVICE_SOCKET, answering pyxis' importer (run as the job's user) with the shared cache's
squashfs, with the real job check (containers/jobcheck.py: the caller's own cgroup is that Slurm job's).

It runs where jobs run and containers are on: a compute node (the head runs no slurmd), the settings' SCHEDULER
slurm, the bundle carrying containers/ (infra/render/bundle.py containers_files: containers on), the settings'
MOUNT_POINT the shared cache's file system. In a thread of the agent, as the health checks are (the agent is the
node's one long-lived root process, kept by its own supervisor: templates/steps/sync.sh.j2); a bundle switch re-execs
the agent, whose new thread binds the socket again (service.bind replaces a stale one). The thread's service is
restarted whenever it stops, its reason logged, after a pause that doubles from RESTART_S to RESTART_MAX_S while it
keeps failing at once (a file system not mounted, a credentials directory that is not root's 0700); a run of
STEADY_S or more resets the pause. A SCHEDULER changed away from slurm stops it. Beside it, each tick, root's
registry credentials kept current (containers/credentials.py: the ECR token refreshed at half its life)."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

from hpcc_contract import containers as c
from hpcc_node.containers import credentials
from hpcc_node.containers.jobcheck import slurm_job_check
from hpcc_node.containers.service import ImageService, make_service

BUNDLE_SUBDIR = "containers"  # infra/render/containers.py BUNDLE_SUBDIR: the bundle has it where containers are on
RESTART_S, RESTART_MAX_S, STEADY_S = 5.0, 300.0, 60.0


def images_wanted(role: str, scheduler: str, bundle_dir: str, mount_point: str) -> bool:
    return (
        role == "compute"
        and scheduler == "slurm"
        and bool(mount_point)
        and os.path.isdir(os.path.join(bundle_dir, BUNDLE_SUBDIR))
    )


class ServiceRunner:
    """One image service at a time in a daemon thread, made by `factory` and made again whenever it stops."""

    def __init__(
        self,
        factory: Callable[[], ImageService],
        log: Callable[[str], None],
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.factory, self.log, self.sleep, self.clock = factory, log, sleep, clock
        self.service: Optional[ImageService] = None
        self.stopping = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.restarts = 0

    def run_once(self) -> str:
        """Make, bind and serve one service until it stops; why it stopped."""
        try:
            service = self.factory()
            service.bind()
        except Exception as e:  # noqa: BLE001 - whatever stops it, said and tried again
            return f"could not start: {type(e).__name__}: {e}"
        self.service = service
        self.log(f"image service listening on {service.path}")
        try:
            service.serve()
            return "its socket stopped accepting"
        except Exception as e:  # noqa: BLE001
            return f"{type(e).__name__}: {e}"
        finally:
            service.close()

    def loop(self) -> None:
        pause = RESTART_S
        while not self.stopping.is_set():
            started = self.clock()
            why = self.run_once()
            if self.stopping.is_set():
                return
            pause = RESTART_S if self.clock() - started >= STEADY_S else pause
            self.restarts += 1
            self.log(f"image service stopped ({why}); restarting in {pause:.0f} s")
            self.sleep(pause)
            pause = min(pause * 2, RESTART_MAX_S)

    def start(self) -> threading.Thread:
        self.stopping.clear()
        self.thread = threading.Thread(target=self.loop, name="hpcc-images", daemon=True)
        self.thread.start()
        return self.thread

    def stop(self) -> None:
        self.stopping.set()
        if self.service is not None:
            self.service.close()

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


class ImagesServing:
    """Agent's image service and credentials methods. What it uses of the agent: its config `c`, `settings`, `node`,
    `log`, `run`, `clock`, `current_dir()`."""

    images: Optional[ServiceRunner] = None
    keeper: Optional[credentials.CredentialsKeeper] = None
    credentials_dir: str = c.ROOT_ENROOT_CONFIG

    def images_factory(self, mount_point: str) -> Callable[[], ImageService]:
        node = self.node.node
        return lambda: make_service(mount_point, node, slurm_job_check(), c.SERVICE_SOCKET)

    def serve_images(self) -> None:
        mount_point = str(self.settings.get("MOUNT_POINT", "") or "")
        wanted = images_wanted(self.c.role, str(self.settings.get("SCHEDULER", "")), self.current_dir(), mount_point)
        if wanted and (self.images is None or not self.images.alive()):
            self.images = ServiceRunner(self.images_factory(mount_point), self.log)
            self.images.start()
            self.log(f"image service started (the shared cache on {mount_point}; jobs checked by their cgroup)")
        if wanted:
            self.follow_credentials()
        elif self.images is not None:
            self.images.stop()
            self.images = None
            self.log("image service stopped: this node no longer runs containers (scheduler or bundle)")

    def follow_credentials(self) -> None:
        """Root's registry credentials for the service's imports (containers/credentials.py), kept current."""
        if self.keeper is None:
            try:
                with open(os.path.join(self.current_dir(), BUNDLE_SUBDIR, credentials.REGISTRIES)) as f:
                    registries = credentials.parse_registries(f.read())
            except FileNotFoundError:
                registries = credentials.Registries(False, False)
            # status/arn:<partition>:ec2:<region>:<account>:instance/<id>.json: this node's Region and account
            parts = self.c.status_key.split(":")
            region, account = (parts[3], parts[4]) if len(parts) > 5 else ("", "")
            self.keeper = credentials.CredentialsKeeper(
                registries,
                region,
                account,
                self.log,
                lambda r: credentials.ecr_token(r, self.run),
                self.clock,
                self.credentials_dir,
            )
        self.keeper.tick()
