"""akgpy as MindSpore's AKG: the pieces that let stock MindSpore hand its fused graph kernels to
akgpy (issue 50). Nothing here imports mindspore at module level."""
