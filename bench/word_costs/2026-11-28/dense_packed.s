# dense_packed: loop .L157 of void endor::cpu::detail::avx512_vnni::dot_rows_q8_i4_dense_1<1>(endor::TensorView const&, unsigned long, unsigned long, endor::cpu::detail::QuantizedX const&, f
vmovdqa32	(%rax,%rdx,2), %zmm19
vpandd	(%r10,%rdx), %zmm1, %zmm17
vmovdqa32	%zmm4, %zmm0
prefetcht1	(%r10,%rbx)
prefetcht1	(%r9,%rbx)
prefetcht1	(%rsi,%rbx)
prefetcht1	(%r11,%rbx)
vpsrlw	$4, (%r10,%rdx), %zmm18
vpdpbusd	%zmm19, %zmm17, %zmm0
vmovdqa32	64(%rax,%rdx,2), %zmm17
vmovaps	0(%r13,%rdx), %zmm2
addq	$64, %rbx
vpandd	%zmm1, %zmm18, %zmm18
vpsrlw	$4, (%r9,%rdx), %zmm20
vpdpbusd	%zmm17, %zmm18, %zmm0
vpandd	(%r9,%rdx), %zmm1, %zmm18
vcvtdq2ps	%zmm0, %zmm0
vmulps	%zmm0, %zmm2, %zmm0
vfmadd231ps	(%r15,%rcx){1to16}, %zmm0, %zmm7
vmovdqa32	%zmm4, %zmm0
vpdpbusd	%zmm19, %zmm18, %zmm0
vpandd	%zmm1, %zmm20, %zmm18
vpsrlw	$4, (%rsi,%rdx), %zmm20
vpdpbusd	%zmm17, %zmm18, %zmm0
vpandd	(%rsi,%rdx), %zmm1, %zmm18
vcvtdq2ps	%zmm0, %zmm0
vmulps	%zmm0, %zmm2, %zmm0
vfmadd231ps	(%r12,%rcx){1to16}, %zmm0, %zmm6
vmovdqa32	%zmm4, %zmm0
vpdpbusd	%zmm19, %zmm18, %zmm0
vpandd	%zmm1, %zmm20, %zmm18
vpsrlw	$4, (%r11,%rdx), %zmm20
vpdpbusd	%zmm17, %zmm18, %zmm0
vpandd	(%r11,%rdx), %zmm1, %zmm18
addq	$64, %rdx
vcvtdq2ps	%zmm0, %zmm0
vmulps	%zmm0, %zmm2, %zmm0
vfmadd231ps	(%r14,%rcx){1to16}, %zmm0, %zmm5
vmovdqa32	%zmm4, %zmm0
vpdpbusd	%zmm19, %zmm18, %zmm0
vpandd	%zmm1, %zmm20, %zmm18
vpdpbusd	%zmm17, %zmm18, %zmm0
vcvtdq2ps	%zmm0, %zmm0
vmulps	%zmm0, %zmm2, %zmm2
vfmadd231ps	(%rdi,%rcx){1to16}, %zmm2, %zmm3
addq	$4, %rcx
cmpq	%rdx, 408(%rsp)
jne	.L157
