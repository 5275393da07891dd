package sim

import (
	"fmt"
	"math"
	"time"
)

// Shape is a decoder-only transformer's dimensions: what the timing model
// needs to count bytes and FLOPs.
type Shape struct {
	Hidden       int
	Layers       int
	Heads        int
	KVHeads      int
	HeadDim      int
	Intermediate int
	Vocab        int
}

// layerWeightBytes is the bf16 weight bytes of one layer (fused QKV, output
// projection, gate+up and down projections; norms are negligible).
func (s Shape) layerWeightBytes() float64 {
	h, hd := float64(s.Hidden), float64(s.HeadDim)
	qkv := float64(s.Heads+2*s.KVHeads) * hd * h
	o := h * float64(s.Heads) * hd
	mlp := 3 * float64(s.Intermediate) * h
	return 2 * (qkv + o + mlp)
}

// headWeightBytes is the bf16 bytes of the output (logits) projection.
func (s Shape) headWeightBytes() float64 { return 2 * float64(s.Vocab) * float64(s.Hidden) }

// kvBytesPerTokenLayer is the bytes of K and V one token keeps in one layer.
func (s Shape) kvBytesPerTokenLayer() float64 { return 2 * 2 * float64(s.KVHeads*s.HeadDim) }

// KVBytesPerToken is the KV cache bytes one token occupies in the full model.
func (s Shape) KVBytesPerToken() float64 { return s.kvBytesPerTokenLayer() * float64(s.Layers) }

// WeightBytes is the bf16 weight bytes of the full model (embedding included).
func (s Shape) WeightBytes() float64 {
	return s.layerWeightBytes()*float64(s.Layers) + 2*s.headWeightBytes()
}

// StepShape is what one engine step computes, summarised for the timing
// model. A step runs every scheduled token through all layers together
// (decode tokens and prefill chunk tokens alike) and attention per part.
type StepShape struct {
	// Decodes is the number of sequences generating one token this step.
	Decodes int
	// DecodeContext is the sum over those sequences of the tokens their
	// attention reads (context length including the new token).
	DecodeContext int64
	// PrefillTokens is the number of prompt tokens computed this step, over
	// all prefill chunks.
	PrefillTokens int64
	// PrefillChunks is the number of prefill chunks (one logits row each).
	PrefillChunks int
	// PrefillAttention is the sum over chunks of P*P/2, where P is the
	// chunk's length: the causal attention of the chunk's tokens among
	// themselves, in query-key pairs.
	PrefillAttention float64
	// PrefillCrossAttention is the sum over chunks of P*offset, where offset
	// is the tokens of the chunk's sequence already in the cache (a prefix
	// cache hit or earlier chunks): the query-key pairs of the new tokens
	// over the cached ones. It has its own coefficient: on the H200
	// measurements (calibration/h200-prefix-cached.jsonl) a cached pair costs
	// about 1.6 times as much as a pair of the self part.
	PrefillCrossAttention float64
}

// AddDecode adds one decoding sequence whose attention reads context tokens.
func (s *StepShape) AddDecode(context int) {
	s.Decodes++
	s.DecodeContext += int64(context)
}

// AddDecodes adds n decoding sequences that each read context tokens.
func (s *StepShape) AddDecodes(n, context int) {
	s.Decodes += n
	s.DecodeContext += int64(n) * int64(context)
}

// AddPrefill adds a prefill chunk of n new tokens after offset cached ones.
func (s *StepShape) AddPrefill(n, offset int) {
	if n <= 0 {
		return
	}
	s.PrefillTokens += int64(n)
	s.PrefillChunks++
	p := float64(n)
	s.PrefillAttention += p * p / 2
	if offset > 0 {
		s.PrefillCrossAttention += p * float64(offset)
	}
}

// Empty reports whether the step computes nothing.
func (s *StepShape) Empty() bool { return s.Decodes == 0 && s.PrefillTokens == 0 }

// Features of the timing model. Each is a time in seconds at the card's
// measured ceilings (or a count), so a fitted coefficient is an inverse
// efficiency (or a per-item overhead).
const (
	featConst       = iota // fixed per-step overhead (graph launch, sampling)
	featLayer              // per-layer overhead (kernel launches, syncs)
	featLinear             // linear layers: roofline of weight bytes and FLOPs
	featKV                 // KV bytes read by decode attention / bandwidth
	featPrefillAttn        // causal attention FLOPs of prefill chunks / GEMM rate
	featDecodeSeq          // per decoding sequence per layer (attention kernels)
	featAttnPart           // per attention call per layer: the decode batch is one, each prefill chunk one
	featCrossAttn          // attention FLOPs of prefill chunks over their cached prefix / GEMM rate
	numFeatures
)

var featureNames = [numFeatures]string{"const_ms", "per_layer_ms", "linear", "kv_read", "prefill_attn", "per_seq_layer_us", "per_attn_call_layer_us", "prefill_cross_attn"}

// Hardware is a card's measured ceilings.
type Hardware struct {
	FLOPs          float64 // dense bf16 GEMM, FLOP/s
	BytesPerSecond float64 // device memory copy bandwidth, bytes/s
}

// Roofline shapes how a linear layer's time moves from bandwidth-bound
// (few tokens: the weights are read once per step) to compute-bound (many
// tokens). Per token a layer does 2 FLOPs per weight, i.e. one FLOP per
// weight byte, so its time is W * smax(1/BW, M*Ratio/FLOPs) for M tokens,
// where smax(a, b) = (a^k + b^k)^(1/k) with k = Sharpness.
type Roofline struct {
	// Ratio is how much less efficient the GEMMs are at computing than the
	// copy is at moving bytes (1: both at their ceilings).
	Ratio float64
	// Sharpness is k: large k is a hard max, small k a gradual knee.
	Sharpness float64
	// WidthExponent makes wide models' GEMMs more efficient: the ratio
	// applied to a model of hidden size h is Ratio * (4096/h)^WidthExponent.
	WidthExponent float64
}

// forShape is the roofline with the ratio adjusted to the model's width.
func (r Roofline) forShape(sh Shape) Roofline {
	if r.WidthExponent != 0 && sh.Hidden > 0 {
		r.Ratio *= math.Pow(4096/float64(sh.Hidden), r.WidthExponent)
	}
	r.WidthExponent = 0
	return r
}

func (r Roofline) time(weightBytes, tokens float64, hw Hardware) float64 {
	if tokens <= 0 {
		return 0
	}
	a := 1 / hw.BytesPerSecond
	b := tokens * r.Ratio / hw.FLOPs
	k := r.Sharpness
	m := math.Max(a, b)
	return weightBytes * m * math.Pow(math.Pow(a/m, k)+math.Pow(b/m, k), 1/k)
}

// features computes the feature vector of step s on shape sh with layers
// layers built (the full model unless calibration measured fewer).
func features(hw Hardware, rl Roofline, sh Shape, layers int, s *StepShape) [numFeatures]float64 {
	var f [numFeatures]float64
	if s.Empty() {
		return f
	}
	L := float64(layers)
	rl = rl.forShape(sh)
	tokens := float64(s.Decodes) + float64(s.PrefillTokens)
	rows := float64(s.Decodes + s.PrefillChunks)
	attnFLOPsPerPair := 4 * float64(sh.Heads*sh.HeadDim) // QK^T and PV, 2 FLOPs per MAC
	f[featConst] = 1e-3
	f[featLayer] = L * 1e-3
	f[featLinear] = rl.time(sh.layerWeightBytes()*L, tokens, hw) + rl.time(sh.headWeightBytes(), rows, hw)
	f[featKV] = sh.kvBytesPerTokenLayer() * L * float64(s.DecodeContext) / hw.BytesPerSecond
	f[featPrefillAttn] = attnFLOPsPerPair * L * s.PrefillAttention / hw.FLOPs
	f[featDecodeSeq] = float64(s.Decodes) * L * 1e-6
	parts := float64(s.PrefillChunks)
	if s.Decodes > 0 {
		parts++
	}
	f[featAttnPart] = parts * L * 1e-6
	f[featCrossAttn] = attnFLOPsPerPair * L * s.PrefillCrossAttention / hw.FLOPs
	return f
}

// TimingModel predicts the duration of one engine step of a given model on
// a given card: a sum of physically shaped terms with fitted coefficients.
type TimingModel struct {
	Hardware Hardware
	Shape    Shape
	Roofline Roofline
	// Coef are the fitted coefficients, one per feature.
	Coef [numFeatures]float64
}

// StepDuration is the predicted time of step s on the full model.
func (m *TimingModel) StepDuration(s *StepShape) time.Duration {
	return time.Duration(m.stepSeconds(s, m.Shape.Layers) * 1e9)
}

func (m *TimingModel) stepSeconds(s *StepShape, layers int) float64 {
	f := features(m.Hardware, m.Roofline, m.Shape, layers, s)
	t := 0.0
	for i, c := range m.Coef {
		t += c * f[i]
	}
	return t
}

// Predict is the time of one step that prefills prefill prompt tokens of
// one sequence (from an empty cache) together with a decode of batch
// sequences that each have context tokens in the cache, as the calibration
// measured it. Either part may be zero.
func (m *TimingModel) Predict(prefill, batch, context int) time.Duration {
	return m.PredictStep(prefill, 0, batch, context)
}

// PredictStep is Predict with the prefill's sequence already holding cached
// tokens in the cache (a prefix-cache hit, or the chunks before this one):
// the prefill's new tokens attend to those too.
func (m *TimingModel) PredictStep(prefill, cached, batch, context int) time.Duration {
	var s StepShape
	s.AddDecodes(batch, context+1)
	s.AddPrefill(prefill, cached)
	return m.StepDuration(&s)
}

// String lists the coefficients, for fit reports.
func (m *TimingModel) String() string {
	out := fmt.Sprintf("roofline_ratio=%.3g sharpness=%.3g width_exp=%.3g ", m.Roofline.Ratio, m.Roofline.Sharpness, m.Roofline.WidthExponent)
	for i, c := range m.Coef {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s=%.4g", featureNames[i], c)
	}
	return out
}

// nnls solves min ||A x - b|| subject to x >= 0 by the Lawson-Hanson active
// set method, working on the normal equations: G = A^T A and c = A^T b.
// Sizes here are tiny (n < 10), so this costs microseconds.
func nnls(G [][]float64, c []float64) []float64 {
	n := len(c)
	x := make([]float64, n)
	passive := make([]bool, n)
	w := make([]float64, n)
	for iter := 0; iter < 3*n+10; iter++ {
		for j := 0; j < n; j++ { // w = c - G x, the negative gradient
			w[j] = c[j]
			for k := 0; k < n; k++ {
				w[j] -= G[j][k] * x[k]
			}
		}
		best, bj := 1e-12, -1
		for j := 0; j < n; j++ {
			if !passive[j] && w[j] > best {
				best, bj = w[j], j
			}
		}
		if bj < 0 {
			break
		}
		passive[bj] = true
		for inner := 0; inner < 3*n+10; inner++ {
			z := solveSubset(G, c, passive)
			ok := true
			for j := 0; j < n; j++ {
				if passive[j] && z[j] <= 0 {
					ok = false
				}
			}
			if ok {
				x = z
				break
			}
			alpha := math.Inf(1)
			for j := 0; j < n; j++ {
				if passive[j] && z[j] <= 0 {
					if a := x[j] / (x[j] - z[j]); a < alpha {
						alpha = a
					}
				}
			}
			for j := 0; j < n; j++ {
				x[j] += alpha * (z[j] - x[j])
				if passive[j] && x[j] <= 1e-15 {
					passive[j] = false
					x[j] = 0
				}
			}
		}
	}
	return x
}

// solveSubset solves G_PP z_P = c_P for the passive set P by Gaussian
// elimination with partial pivoting; other entries of z are 0.
func solveSubset(G [][]float64, c []float64, use []bool) []float64 {
	n := len(use)
	idx := make([]int, 0, n)
	for j, u := range use {
		if u {
			idx = append(idx, j)
		}
	}
	k := len(idx)
	M := make([][]float64, k)
	for i, ci := range idx {
		M[i] = make([]float64, k+1)
		for j, cj := range idx {
			M[i][j] = G[ci][cj]
		}
		M[i][k] = c[ci]
	}
	for i := 0; i < k; i++ {
		p := i
		for r := i + 1; r < k; r++ {
			if math.Abs(M[r][i]) > math.Abs(M[p][i]) {
				p = r
			}
		}
		M[i], M[p] = M[p], M[i]
		if math.Abs(M[i][i]) < 1e-300 {
			continue
		}
		for r := 0; r < k; r++ {
			if r == i {
				continue
			}
			f := M[r][i] / M[i][i]
			for col := i; col <= k; col++ {
				M[r][col] -= f * M[i][col]
			}
		}
	}
	out := make([]float64, n)
	for i, ci := range idx {
		if math.Abs(M[i][i]) > 1e-300 {
			out[ci] = M[i][k] / M[i][i]
		}
	}
	return out
}
