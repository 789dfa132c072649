# bitmap_kernel: loop .L1101 of void endor::cpu::detail::avx512_vnni::dot_rows_q8_i4_1<2, true>(endor::TensorView const&, unsigned long, unsigned long, endor::cpu::detail::QuantizedX const&, f
prefetcht1	(%rbx)
movq	384(%rsp), %r11
prefetcht1	(%r15)
movq	536(%rsp), %r9
prefetcht1	(%r14)
prefetcht1	0(%r13)
vfmadd231ps	(%r11,%rax,4){1to16}, %zmm8, %zmm12
movq	520(%rsp), %r11
vfmadd231ps	(%r9,%rax,4){1to16}, %zmm7, %zmm13
movq	376(%rsp), %r9
vfmadd231ps	(%r11,%rax,4){1to16}, %zmm4, %zmm15
vfmadd231ps	(%r9,%rax,4){1to16}, %zmm1, %zmm14
vmovaps	%zmm12, 1088(%rsp)
vmovaps	%zmm13, 1152(%rsp)
vmovaps	%zmm15, 1216(%rsp)
addq	$1, %rax
addq	$16, %rbx
addq	$16, %r15
addq	$16, %r14
vmovaps	%zmm14, 1280(%rsp)
addq	$16, %r13
cmpq	%rax, 448(%rsp)
je	.L1100
movq	%rax, %r10
vmovdqa32	%zmm0, %zmm7
xorl	%r8d, %r8d
xorl	%r9d, %r9d
movq	544(%rsp), %r11
salq	$7, %r10
kmovq	-1040(%rbx), %k4
kmovq	-1040(%r15), %k5
kmovq	-1040(%r14), %k6
vmovdqa32	%zmm0, %zmm4
kmovq	-1040(%r13), %k7
vmovaps	(%r12,%r10), %zmm24
vpbroadcastb	(%r11,%rax), %zmm8
movq	528(%rsp), %r11
popcntq	-1040(%rbx), %r8
popcntq	-1040(%r14), %r9
addq	%rdx, %r8
addq	%rsi, %r9
vmovaps	64(%r12,%r10), %zmm10
vpbroadcastb	(%r11,%rax), %zmm26
movq	512(%rsp), %r11
vmovdqa64	%zmm8, %zmm1
vpexpandb	(%rdx), %zmm1{%k4}
kmovq	-1032(%rbx), %k4
xorl	%edx, %edx
vpexpandb	(%r8), %zmm8{%k4}
popcntq	-1040(%r13), %rdx
vpbroadcastb	(%r11,%rax), %zmm25
movq	368(%rsp), %r11
vpbroadcastb	(%r11,%rax), %zmm23
vmovq	%xmm5, %r11
vmovdqa64	%zmm25, %zmm9
vpexpandb	(%rsi), %zmm9{%k6}
vmovdqa64	(%r11,%r10), %zmm28
vmovq	%xmm5, %rsi
xorl	%r11d, %r11d
popcntq	-1040(%r15), %r11
vmovdqa64	%zmm23, %zmm29
vpexpandb	(%rdi), %zmm29{%k7}
addq	%rcx, %r11
kmovq	-1032(%r14), %k6
vpdpbusd	%zmm28, %zmm1, %zmm7
vmovdqa64	%zmm26, %zmm1
vpexpandb	(%rcx), %zmm1{%k5}
addq	%rdx, %rdi
kmovq	-1032(%r15), %k5
vpexpandb	(%r11), %zmm26{%k5}
vpexpandb	(%r9), %zmm25{%k6}
xorl	%edx, %edx
popcntq	-1032(%rbx), %rdx
vpdpbusd	%zmm28, %zmm1, %zmm4
xorl	%ecx, %ecx
addq	%r8, %rdx
vmovdqa32	%zmm0, %zmm1
xorl	%r8d, %r8d
popcntq	-1032(%r15), %rcx
addq	%r11, %rcx
vpdpbusd	%zmm28, %zmm9, %zmm1
vmovdqa32	%zmm0, %zmm9
vpdpbusd	%zmm28, %zmm29, %zmm9
vmovdqa32	%zmm0, %zmm28
vcvtdq2ps	%zmm7, %zmm7
vfmadd132ps	%zmm24, %zmm11, %zmm7
vcvtdq2ps	%zmm4, %zmm4
vfmadd132ps	%zmm24, %zmm11, %zmm4
vcvtdq2ps	%zmm1, %zmm1
vfmadd132ps	%zmm24, %zmm11, %zmm1
vcvtdq2ps	%zmm9, %zmm9
vfmadd132ps	%zmm24, %zmm11, %zmm9
vmovdqa64	64(%rsi,%r10), %zmm24
xorl	%esi, %esi
popcntq	-1032(%r14), %rsi
addq	%r9, %rsi
kmovq	-1032(%r13), %k7
vpexpandb	(%rdi), %zmm23{%k7}
popcntq	-1032(%r13), %r8
vpdpbusd	%zmm24, %zmm8, %zmm28
addq	%r8, %rdi
vcvtdq2ps	%zmm28, %zmm8
vfmadd132ps	%zmm10, %zmm7, %zmm8
vmovdqa32	%zmm0, %zmm7
vpdpbusd	%zmm24, %zmm26, %zmm7
vcvtdq2ps	%zmm7, %zmm7
vfmadd132ps	%zmm10, %zmm4, %zmm7
vmovdqa32	%zmm0, %zmm4
vpdpbusd	%zmm24, %zmm25, %zmm4
vcvtdq2ps	%zmm4, %zmm4
vfmadd132ps	%zmm10, %zmm1, %zmm4
vmovdqa32	%zmm0, %zmm1
vpdpbusd	%zmm24, %zmm23, %zmm1
vcvtdq2ps	%zmm1, %zmm1
vfmadd132ps	%zmm10, %zmm9, %zmm1
testb	$1, %al
je	.L1101
