package service

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
)

// GRPCServer implements kafkastreams.v1.WatermarkService over a Tracker.
type GRPCServer struct {
	pb.UnimplementedWatermarkServiceServer
	t *Tracker
}

// NewGRPCServer returns the gRPC service over t; register it with
// pb.RegisterWatermarkServiceServer.
func NewGRPCServer(t *Tracker) *GRPCServer { return &GRPCServer{t: t} }

// ToProto turns a stage view into its gRPC shape.
func ToProto(v StageView) *pb.StageWatermark {
	s := v.Snapshot
	out := &pb.StageWatermark{
		Stage:                 v.Stage,
		WatermarkMillis:       int64(s.Watermark),
		Held:                  s.Held,
		MissingPartitions:     append([]int32{}, s.Missing...),
		TotalSourcePartitions: s.Total,
		AllIdle:               s.AllIdle,
		MinimumPartition:      s.MinPartition,
	}
	for _, p := range s.Partitions {
		out.Partitions = append(out.Partitions, &pb.PartitionWatermark{
			SourcePartition: p.Partition,
			WatermarkMillis: int64(p.Watermark),
			Idle:            p.Idle,
			Reported:        p.Reported,
			Minimum:         p.Partition == s.MinPartition,
		})
	}
	return out
}

func (s *GRPCServer) selected(stage string) ([]StageView, error) {
	if stage == "" {
		return s.t.Stages(), nil
	}
	v, err := s.t.Stage(stage)
	if errors.Is(err, ErrUnknownStage) {
		return nil, nil
	}
	return []StageView{v}, err
}

// GetWatermarks returns one stage (NOT_FOUND if no report named it yet) or,
// for an empty stage, every stage sorted by name.
func (s *GRPCServer) GetWatermarks(ctx context.Context, req *pb.GetWatermarksRequest) (*pb.GetWatermarksResponse, error) {
	views, err := s.selected(req.GetStage())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if req.GetStage() != "" && len(views) == 0 {
		return nil, status.Errorf(codes.NotFound, "watermarkmgr: no report has named stage %q", req.GetStage())
	}
	resp := &pb.GetWatermarksResponse{}
	for _, v := range views {
		resp.Stages = append(resp.Stages, ToProto(v))
	}
	return resp, nil
}

// WatchWatermarks sends the current state of the selected stages (all for an
// empty stage; a named stage that has not reported yet is sent once it
// does), then each stage again every time a batch of reports changes it,
// until the client cancels. A burst of batches may be coalesced into one
// message per stage: each message is the state at the time it is sent.
func (s *GRPCServer) WatchWatermarks(req *pb.WatchWatermarksRequest, stream pb.WatermarkService_WatchWatermarksServer) error {
	sent := map[string]uint64{}
	for {
		changed := s.t.Changed()
		views, err := s.selected(req.GetStage())
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		for _, v := range views {
			if ver, ok := sent[v.Stage]; ok && ver == v.Version {
				continue
			}
			if err := stream.Send(ToProto(v)); err != nil {
				return err
			}
			sent[v.Stage] = v.Version
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}
