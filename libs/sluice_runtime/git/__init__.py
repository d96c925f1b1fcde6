"""Git remotes: listing refs and checking out, each operation in a worker child.

The source-controller checks out GitRepositories with it; the
resourceset-controller's GitBranch and GitTag providers list a remote's
branches and tags with the same authentication handling (basic, bearer, CA,
SSH with verified host keys), so a Secret means the same to both.
"""
