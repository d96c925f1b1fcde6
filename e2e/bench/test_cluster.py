"""A benchmark's watcher rides out an API server that does not answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from e2e.bench.cluster import Watching
from sluice_envtest.controlplane import free_port
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import CONFIG_MAP


class CountedLists(KubeClient):
    """The real client, saying when it has been asked for three lists."""

    lists = 0
    third = asyncio.Event()

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        self.lists += 1
        if self.lists == 3:
            self.third.set()
        return await super().list(*args, **kwargs)


async def test_a_list_the_api_does_not_answer_is_retried_not_the_end_of_the_watcher(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: gone, cluster: {{server: "https://127.0.0.1:{free_port()}",'
        " insecure-skip-tls-verify: true}}]\n"
        "users: [{name: nobody, user: {}}]\n"
        "contexts: [{name: gone, context: {cluster: gone, user: nobody}}]\n"
        "current-context: gone\n"
    )
    plain = await KubeClient.connect(kubeconfig=str(kubeconfig), verify=False, qps=0)
    client = CountedLists(plain._shared)
    watching = Watching(client, CONFIG_MAP, "default")
    task = asyncio.get_running_loop().create_task(watching._run())
    try:
        third = asyncio.get_running_loop().create_task(client.third.wait())
        await asyncio.wait({task, third}, return_when=asyncio.FIRST_COMPLETED)
        third.cancel()
        assert not task.done(), f"the watcher ended: {task.exception()!r}"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
