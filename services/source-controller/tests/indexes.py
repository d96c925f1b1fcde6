"""Chart repository indexes the size and shape of real public ones."""

from __future__ import annotations


def bitnami_like_index(charts: int, versions: int) -> bytes:
    """An index shaped as bitnami's: long digests, URLs, descriptions and image annotations."""
    lines = ["apiVersion: v1", "entries:"]
    for c in range(charts):
        lines.append(f"  chart{c}:")
        for v in range(versions):
            lines += [
                "  - annotations:",
                "      category: Database",
                "      images: |",
                f"        - name: chart{c}",
                f"          image: docker.io/bitnami/chart{c}:1.{v}.0-debian-12-r0",
                "      licenses: Apache-2.0",
                "    apiVersion: v2",
                f"    appVersion: 1.{v}.0",
                "    created: '2024-01-01T00:00:00.000000000Z'",
                "    dependencies:",
                "    - name: common",
                "      repository: oci://registry-1.docker.io/bitnamicharts",
                "      tags: [bitnami-common]",
                "      version: 2.x.x",
                "    description: A long description of the chart, as bitnami's are.",
                f"    digest: {'0123456789abcdef' * 4}",
                "    home: https://bitnami.com",
                f"    icon: https://bitnami.com/assets/stacks/chart{c}/img/stack-220x234.png",
                "    keywords: [database, sql, cluster]",
                "    maintainers:",
                "    - name: Broadcom, Inc. All Rights Reserved.",
                "      url: https://github.com/bitnami/charts",
                f"    name: chart{c}",
                f"    sources: [https://github.com/bitnami/charts/tree/main/bitnami/chart{c}]",
                "    urls:",
                f"    - https://charts.bitnami.com/bitnami/chart{c}-{v}.0.0.tgz",
                f"    version: {v}.0.0",
            ]
    return ("\n".join(lines) + "\n").encode()
