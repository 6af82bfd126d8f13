"""bench.op_profile: which group each MindSpore operator of the step is counted in."""

from __future__ import annotations

from msdet.bench.op_profile import BN_SILU, DENSE_BWD, DENSE_FWD, OPTIM, OTHER, POOL, msdet_category

NET = "Default/net_with_loss-DetectorWithLoss/network-YOLOX"
SPP = f"{NET}/backbone-YOLOPAFPN/backbone-CSPDarknet/dark5-SequentialCell/1-SPPBottleneck"
STEM = f"{NET}/backbone-YOLOPAFPN/backbone-CSPDarknet/stem-Focus"


def test_spps_kernel_counts_as_pooling_and_its_convolutions_as_theirs():
    assert msdet_category("Custom", f"{SPP}/Custom-op0") == POOL
    assert msdet_category("Custom", f"Gradients/{SPP}/Grad_Custom/Custom-op0") == POOL
    assert msdet_category("MaxPoolGrad", f"Gradients/{SPP}/m-CellList/0-MaxPool2d/x") == POOL
    conv1 = f"{SPP}/conv1-BaseConv"
    assert msdet_category("Custom", f"{conv1}/fused-BatchNormSiLU/Custom-op0") == BN_SILU
    assert msdet_category("Conv2D", f"{conv1}/conv-Conv2d/Conv2D-op0") == DENSE_FWD


def test_the_flat_sgd_counts_as_the_optimizer_and_the_heads_transpose_as_the_rest():
    assert msdet_category("Custom", "Default/optimizer-DecayInKernelSGD/Custom-op0") == OPTIM
    assert msdet_category("Custom", f"{NET}/head-YOLOXHead/Custom-op0") == OTHER


def test_the_pointwise_kernel_counts_as_a_dense_convolution_each_way():
    conv = f"{NET}/backbone-YOLOPAFPN/C3_p3-CSPLayer/conv1-BaseConv/conv-PointwiseConv2d"
    assert msdet_category("Custom", f"{conv}/Custom-op0") == DENSE_FWD
    assert (
        msdet_category("Custom", f"Gradients/Default/{conv[8:]}/Grad_Custom/Custom-op3")
        == DENSE_BWD
    )


def test_the_focus_kernel_counts_as_a_dense_convolution_and_its_batchnorm_as_batchnorm():
    assert msdet_category("Custom", f"{STEM}/Custom-op0") == DENSE_FWD
    assert msdet_category("Custom", f"Gradients/{STEM}/Grad_Custom/Custom-op0") == DENSE_BWD
    norm = f"{STEM}/conv-BaseConv/fused-BatchNormSiLU/Custom-op0"
    assert msdet_category("Custom", norm) == BN_SILU
