# mask: + the word's 64 mask bits into a k register and a zero-masked move (bench_word_costs' + mask)
# Hand-written llvm-mca block (bench/word_costs/mca.sh): 4 rows x 2 words (8 row-words) an iteration,
# registers as the one-token kernel uses them: zmm16/zmm17 x of the two words, zmm18 the zero codes, zmm20-23 scratch.
kmovq 0(%r8), %k1
vmovdqu8 %zmm16, %zmm20 {%k1} {z}
vpdpbusd %zmm24, %zmm20, %zmm0
kmovq 0(%r9), %k2
vmovdqu8 %zmm16, %zmm21 {%k2} {z}
vpdpbusd %zmm25, %zmm21, %zmm1
kmovq 0(%r10), %k3
vmovdqu8 %zmm16, %zmm22 {%k3} {z}
vpdpbusd %zmm26, %zmm22, %zmm2
kmovq 0(%r11), %k4
vmovdqu8 %zmm16, %zmm23 {%k4} {z}
vpdpbusd %zmm27, %zmm23, %zmm3
kmovq 8(%r8), %k1
vmovdqu8 %zmm17, %zmm20 {%k1} {z}
vpdpbusd %zmm24, %zmm20, %zmm0
kmovq 8(%r9), %k2
vmovdqu8 %zmm17, %zmm21 {%k2} {z}
vpdpbusd %zmm25, %zmm21, %zmm1
kmovq 8(%r10), %k3
vmovdqu8 %zmm17, %zmm22 {%k3} {z}
vpdpbusd %zmm26, %zmm22, %zmm2
kmovq 8(%r11), %k4
vmovdqu8 %zmm17, %zmm23 {%k4} {z}
vpdpbusd %zmm27, %zmm23, %zmm3
addq $16, %r8
addq $16, %r9
addq $16, %r10
addq $16, %r11
cmpq %r8, %rbx
jne .Ltop
