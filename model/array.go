package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"gorun/datasets"
	"gorun/safetensors"
)

// ReadArray reads an array from a file as a tensor, with the readers
// data.tensors uses: a .npy file, or tensor key of a .safetensors file
// (key "": its only tensor). float32, float64, uint8, int32 and int64
// arrays are read; other dtypes are refused, naming the file.
func ReadArray(path, key string) (*tensor.Dense, error) {
	a, err := datasets.ReadArray(path, key)
	if err != nil {
		return nil, err
	}
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	if len(a.Shape) == 0 || n == 0 {
		return nil, fmt.Errorf("%s: shape %v holds no samples", a.Where, a.Shape)
	}
	var back any
	b := a.Data
	switch a.DType {
	case safetensors.DTypeF32:
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		back = v
	case safetensors.DTypeF64:
		v := make([]float64, n)
		for i := range v {
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		back = v
	case safetensors.DTypeU8:
		back = append([]uint8(nil), b[:n]...)
	case safetensors.DTypeI32:
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
		back = v
	case safetensors.DTypeI64:
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		back = v
	default:
		return nil, fmt.Errorf("%s: dtype %s: want float32, float64, uint8, int32 or int64", a.Where, a.DType)
	}
	return tensor.New(tensor.WithShape(a.Shape...), tensor.WithBacking(back)), nil
}
