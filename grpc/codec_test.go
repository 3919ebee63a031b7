package grpc

import (
	"testing"

	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestUnknownField: a field the contract does not have is found at any
// depth, in a list, a map or a message field, and named by its path.
func TestUnknownField(t *testing.T) {
	field99 := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	with := func(m proto.Message) proto.Message {
		m.ProtoReflect().SetUnknown(field99)
		return m
	}
	meta := func(v *structpb.Value) *structpb.Struct {
		return &structpb.Struct{Fields: map[string]*structpb.Value{"k": v}}
	}
	for want, req := range map[string]*cofferv1.ChangeRequest{
		"":                  with(&cofferv1.ChangeRequest{Namespace: 1}).(*cofferv1.ChangeRequest),
		".ops[1]":           {Ops: []*cofferv1.OpRequest{{Currency: "gold"}, with(&cofferv1.OpRequest{}).(*cofferv1.OpRequest)}},
		".ops[0].purchase":  {Ops: []*cofferv1.OpRequest{{Purchase: with(&cofferv1.Purchase{}).(*cofferv1.Purchase)}}},
		`.meta.fields["k"]`: {Meta: meta(with(structpb.NewBoolValue(true)).(*structpb.Value))},
		`.meta`:             {Meta: with(meta(structpb.NewBoolValue(true))).(*structpb.Struct)},
	} {
		path, num, found := unknownField(req.ProtoReflect())
		if !found || num != 99 || path != want {
			t.Errorf("found %v, field %d at %q; want field 99 at %q", found, num, path, want)
		}
	}
	if _, _, found := unknownField((&cofferv1.ChangeRequest{Namespace: 1, Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}},
		Meta: meta(structpb.NewStringValue("x"))}).ProtoReflect()); found {
		t.Error("found an unknown field in a request of the contract")
	}
}
