"""The custom ops (``torch.ops.septran.*``) that the rewritten graphs call; each module registers one."""
