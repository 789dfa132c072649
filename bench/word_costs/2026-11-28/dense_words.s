# dense_words: loop .L1176 of void endor::cpu::detail::avx512_vnni::dot_rows_q8_i4_1<2, false>(endor::TensorView const&, unsigned long, unsigned long, endor::cpu::detail::QuantizedX const&, 
vmovdqa32	%zmm1, %zmm9
vmovdqa32	(%r10,%rax), %zmm2
leaq	(%r14,%rax), %rcx
vmovdqu32	(%r8,%rax), %zmm3
vmovdqa32	%zmm1, %zmm0
vmovdqa32	%zmm1, %zmm21
vmovdqa32	%zmm1, %zmm20
vmovaps	(%r9,%rax), %zmm8
vpdpbusd	%zmm2, %zmm3, %zmm9
vmovdqu32	(%rax), %zmm3
vmovdqa32	64(%r10,%rax), %zmm23
vmovaps	64(%r9,%rax), %zmm22
vpdpbusd	%zmm2, %zmm3, %zmm0
vmovdqu32	(%rcx), %zmm3
vpdpbusd	%zmm2, %zmm3, %zmm21
vmovdqu32	(%rdi,%rax), %zmm3
vpdpbusd	%zmm2, %zmm3, %zmm20
vmovdqu32	64(%r8,%rax), %zmm2
vcvtdq2ps	%zmm9, %zmm9
subq	$-128, %rax
vfmadd132ps	%zmm8, %zmm11, %zmm9
vmovdqa32	%zmm1, %zmm3
vcvtdq2ps	%zmm0, %zmm0
vfmadd132ps	%zmm8, %zmm11, %zmm0
vcvtdq2ps	%zmm21, %zmm21
vfmadd132ps	%zmm8, %zmm11, %zmm21
vcvtdq2ps	%zmm20, %zmm20
vfmadd132ps	%zmm8, %zmm11, %zmm20
vmovdqa32	%zmm1, %zmm8
vpdpbusd	%zmm23, %zmm2, %zmm8
vmovdqa32	%zmm1, %zmm2
vcvtdq2ps	%zmm8, %zmm8
vfmadd132ps	%zmm22, %zmm9, %zmm8
vmovdqu64	-64(%rax), %zmm9
vmovdqu32	-64(%rdi,%rax), %zmm15
vpdpbusd	%zmm23, %zmm9, %zmm3
vfmadd231ps	(%r11,%rdx,4){1to16}, %zmm8, %zmm17
vcvtdq2ps	%zmm3, %zmm3
vfmadd132ps	%zmm22, %zmm0, %zmm3
vmovdqu64	64(%rcx), %zmm0
vpdpbusd	%zmm23, %zmm0, %zmm2
vmovdqa32	%zmm1, %zmm0
vpdpbusd	%zmm23, %zmm15, %zmm0
vfmadd231ps	(%r12,%rdx,4){1to16}, %zmm3, %zmm16
vcvtdq2ps	%zmm2, %zmm2
vfmadd132ps	%zmm22, %zmm21, %zmm2
vcvtdq2ps	%zmm0, %zmm0
vfmadd132ps	%zmm22, %zmm20, %zmm0
vfmadd231ps	(%rbx,%rdx,4){1to16}, %zmm2, %zmm13
vfmadd231ps	(%r15,%rdx,4){1to16}, %zmm0, %zmm12
addq	$1, %rdx
cmpq	%r13, %rdx
jne	.L1176
