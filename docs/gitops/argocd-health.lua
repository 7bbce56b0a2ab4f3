-- Argo CD health check for cache.edgepool.io/CacheNode.
-- Install it in argocd-cm as resource.customizations.health.cache.edgepool.io_CacheNode
-- (see docs/gitops/README.md). It follows the same rules as kstatus:
--   the operator has not seen the latest spec   -> Progressing
--   Stalled=True (cannot render, no usable node) -> Degraded
--   Reconciling=True (pods rolling out)           -> Progressing
--   Ready=True                                    -> Healthy
hs = {}
local function condition(t)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == t then
      return c
    end
  end
  return nil
end

if obj.status == nil or obj.status.observedGeneration == nil or
   obj.status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe the latest spec"
  return hs
end

local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message
  return hs
end

local reconciling = condition("Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = reconciling.message
  return hs
end

local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
  local overflow = condition("QueueOverflow")
  if overflow ~= nil and overflow.status == "True" then
    hs.message = ready.message .. "; " .. overflow.message
  end
  return hs
end

hs.status = "Progressing"
if ready ~= nil then
  hs.message = ready.message
else
  hs.message = "Waiting for the CacheNode to become ready"
end
return hs
